"""rocke_aot.aot."""
