"""Control plane of specsweep: sweep spec, search, Ray workers, tracking, frontier, CLI."""
