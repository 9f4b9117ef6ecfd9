"""``traintrace ui``: the live lineage page, a follower of the pipeline's topics.

It reads ``lineage.by-cohort`` (the processor's input, in the order the worker folded it),
``lineage.control`` and ``lineage.alerts`` from the beginning and then follows them, folds the
input through the same :class:`~streams.referee.referee.Referee` the worker runs (so the page
cannot disagree with the worker), and serves one page that polls a JSON view of that fold:

- :mod:`.state`: the fold and what the page shows (:class:`UIState`), Kafka-free;
- :mod:`.follower`: one thread per topic feeding the state;
- :mod:`.drawing`: the report's lineage picture of a cohort, rendered in the background and
  cached by the cohort's event count;
- :mod:`.server`: the HTTP server (standard library) and its routes; the page's HTML, JS and CSS
  are files of ``static/`` shipped with the package (no build step, nothing loaded from elsewhere).
"""

from streams.ui.errors import UIError
from streams.ui.server import UIServer, start_ui
from streams.ui.state import UIState

__all__ = ["UIError", "UIServer", "UIState", "start_ui"]
