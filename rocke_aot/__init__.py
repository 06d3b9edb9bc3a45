"""rocke-aot: ahead-of-time kernel cache builder and artifact service for AMD GPUs.

The import package spans several top-level folders of the repository:

    rocke_aot            (rocke_aot/)  errors, paths shared by every component
    rocke_aot.aot        (aot/)        lanes, profiles, toolchains, lowering, builder, CLI
    rocke_aot.cache      (cache/)      content-addressed SQLAlchemy + zstd store
    rocke_aot.service    (service/)    FastAPI app and HTTP client
    rocke_aot.variants   (variants/)   families, variant tables, arch data, tile efficiency
"""

__version__ = "0.1.0"
