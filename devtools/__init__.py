"""Maintainer tooling: what writes the product's run-time data, apart from the product layers.

    devtools/goldens.py       python -m devtools.goldens --out aot/goldens
        lowers every golden case on every lane (rocke_aot.aot.golden: the product's read-only
        side picks the cases and lowers them) ─> OUT/ir-goldens.json + OUT/ir-goldens.ir.zst;
        refuses on a dirty git tree (the hashes would describe uncommitted code)
    devtools/characterize.py  python -m devtools.characterize --out variants/characterization
        probes every toolchain here (rocke_aot.aot.characterize.domain) ─> OUT/<lane>.json
    devtools/llvm24_report.py python -m devtools.llvm24_report --out bench/results/llvm24-characterization.json
        the LLVM 24 vs LLVM 22 delta report docs/llvm24-lane.md cites
    bench/fit_perf.py         the ranking's time-model fit (--write FILE), beside the benchmarks

Every tool writes only the paths it is given (``--out``; nothing defaults into the package),
and reads the previous files from there too. The product reads what they wrote as package
data (pyproject.toml [tool.setuptools.package-data]) and never writes it: `rocke-aot golden
--check` and `rocke-aot characterize --check` compare a fresh run with it. devtools is a
source-checkout package: it is not in the wheel, and no product module imports it
(tests/test_devtools.py).
"""
