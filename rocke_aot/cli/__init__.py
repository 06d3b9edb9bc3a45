"""The ``rocke-aot`` command line, the top layer: thin click commands over the library.

    entry.py       the `rocke-aot` script: a warm `fetch KEY` from the host's note (rocke_aot/warm.py)
                   before click loads, else main.py
    main.py        the group, command registration, the one error-translation point
    options.py     shared options (lanes, arches, --json) validated through the vocabulary
    build.py, cache.py, compile.py, toolchains.py, variants.py, characterize.py: one command
                   (or group) each, parse -> call the library -> format
"""
