"""The ``rocke-aot`` command line, the top layer: thin click commands over the library.

    main.py        the group, command registration, the one error-translation point
    options.py     shared options (lanes, arches, --json) validated through the vocabulary
    build.py, cache.py, compile.py, toolchains.py, variants.py, characterize.py: one command
                   (or group) each, parse -> call the library -> format
"""
