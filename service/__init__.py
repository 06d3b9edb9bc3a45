"""rocke_aot.service."""
