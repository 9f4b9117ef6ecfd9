"""Service layer: load, call the core, return results. No printing, no argument parsing."""
