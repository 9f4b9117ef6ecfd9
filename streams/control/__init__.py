"""The fold of ``lineage.control`` (pure): what each job's commands mean together."""
