"""The laptop's and the tests' conveniences, apart from the runtime: a local Kafka broker and a
three-node cluster started from Maven Central jars (``broker.py``, ``cluster.py``; the secure
broker's CA, users and ACLs in ``secure.py``), and a worker run as a subprocess with the waits
around it (``worker_process.py``).

Imported by the command line (``traintrace broker``, a default bootstrap when none is given),
the demo, ``streams.testing``, the benchmarks and the tests; never by the worker, the job
client, the operators' commands or the audit (``tests/unit/test_layers.py``)."""
