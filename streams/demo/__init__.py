"""``traintrace demo`` and ``traintrace smoke``: real numpy training jobs through the live pipeline.

The training side (issue 5), numpy only:

- :mod:`streams.demo.model`: a small MLP on a synthetic classification task; SGD, checkpoints
  (deterministic bytes, atomic writes), weight averaging, a reference-model KL term.
- :mod:`streams.demo.jobs`: :func:`~streams.demo.jobs.run_job`, the training loop of one job
  driving the lineage client; the cohort's shared checkpoint registry.
- :mod:`streams.demo.scenario`: the six-job demo cohort, its story and the expected verdicts;
  :func:`~streams.demo.scenario.run_scenario_job` is what one demo process runs.

The run (:func:`streams.demo.run.run_demo`, no printing), by step:

- :mod:`streams.demo.run_setup`: a fresh run's ids, topics, directories and signing key.
- :mod:`streams.demo.leftovers`: the run's work directory and, once it is over, its topics.
- :mod:`streams.demo.workers`: the ``traintrace worker`` processes and their consumer group.
- :mod:`streams.demo.processes`: the job processes and what they report to the parent.
- :mod:`streams.demo.state` and :mod:`streams.demo.follower`: the live view's state.
- :mod:`streams.demo.readback`: the run's topics read back once it is quiescent.
- :mod:`streams.demo.audit_trail`: export, audit and drawing of the run's log.
- :mod:`streams.demo.outcome`: the report (commands, jobs, timing, offline fold).
- :mod:`streams.demo.story`: the facts expected of the run, :func:`~streams.demo.story.check_story`.
- :mod:`streams.demo.smoke` and :mod:`streams.demo.examples`: ``traintrace smoke``, the worked example.

Importing this package (which any ``streams.demo`` module does first) limits BLAS to one thread
per process, before numpy is imported: see :mod:`streams.demo.blas`.
"""

from streams.demo.blas import one_thread_per_process as _one_thread_per_process

_one_thread_per_process()  # first: nothing imported below may have imported numpy before it

from streams.demo.errors import DemoError  # noqa: E402

__all__ = ["DemoError"]
