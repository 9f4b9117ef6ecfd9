"""The live processor: a Faust application around the router and the referee (thin)."""
