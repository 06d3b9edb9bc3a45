"""rocke_aot.variants."""
