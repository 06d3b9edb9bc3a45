"""rocke_aot.cache."""
