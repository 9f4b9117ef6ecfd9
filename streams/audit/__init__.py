"""Reading a traintrace log without trusting the system that wrote it.

==========================  =========================================================================
``log``                     the :class:`~streams.audit.log.AuditLog` loaders (topics, archive, JSONL)
                            and :func:`~streams.audit.log.fold_order`
``export``                  the topics into one archive file
``audit``                   ``traintrace audit``: :func:`~streams.audit.run.audit` (the checks are
                            in ``auditor``, ``chains``, ``input_check``, ``replay``, ``commitments``,
                            ``compare``; the verdicts in ``report``; the processes in ``shards``)
``proofs``                  Merkle proof documents over a log
``asof``                    what the referee knew at one moment
``analyze``                 offline analysis of a JSON Lines log
``errors``                  :class:`~streams.audit.errors.AuditError`, the root of this package's errors
==========================  =========================================================================
"""
