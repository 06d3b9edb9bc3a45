"""``python -m rocke_aot.cli``: the same command as the ``rocke-aot`` script."""

from rocke_aot.cli.main import main

if __name__ == "__main__":
    main()
