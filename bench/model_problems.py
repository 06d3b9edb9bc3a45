"""Model-layer problem files: a PyTorch model's conv and linear layers -> a `build --problems` file.

    python bench/model_problems.py resnet50 --batch 8 -o bench/problems/models/resnet50.json
    python bench/model_problems.py vit_b16 --batch 8 -o bench/problems/models/vit_b16.json
    python bench/model_problems.py mypkg.nets:make_net --input 8,3,224,224 -o net.json   (any nn.Module)
    rocke-aot build --arch gfx942 --problems net.json          (the layers' own specs: docs/build.md)

    model, example input ──trace(): forward hooks on every Conv2d and Linear, the model and
        │                   the input on torch's meta device (shapes only, no arithmetic)
        ▼
    layer records (plain dicts, no torch: what each layer is and the shape it was called with)
        {"kind": "conv2d", "name", "input": [N, C, H, W], "out_channels", "kernel_size": [R, S],
         "stride", "padding", "dilation", "groups", "padding_mode"}
        {"kind": "linear", "name", "input": [..., in_features], "out_features"}
        ▼ problems(records, dtype)    pure: the part tests/test_workload.py checks without torch
    {family: [distinct problems]}     the bench/problems/ format, first-seen order
        Conv2d                        conv_direct_fwd: n, h, w, c, k, r, s, stride, pad, dilation
        Conv2d, kernel == stride == P, no padding or dilation (a patch embedding)
                                      conv_dgrad_patch: its dX (n, h, w, c, k, p), and the forward
                                      as the GEMM it is after the patch reshape: gemm m = N*Hp*Wp,
                                      n = K, k = P*P*C
        Linear                        gemm: m = the rows of its input (every leading dim), n = out,
                                      k = in
        skipped, each named on stderr with why: groups != 1 (no grouped family), a padding mode
        other than zeros, a padding given as text ('same'), a conv that is not 2-d; matmuls
        that are not modules (attention's Q @ K^T: batched, and gemm has no batch dimension)

ResNet-50 and ViT-B/16 are defined below in plain torch (no torchvision): ResNet-50 as He et al.
2015 Table 1 with projection shortcuts where the shape changes and the stride on the 3x3 conv
(v1.5, as torchvision builds it; the original put it on the first 1x1), ViT-B/16 as Dosovitskiy
et al. 2020 Table 1 (12 layers, hidden 768, MLP 3072, 12 heads, patch 16) at 224x224. torch is
imported only to trace: `pip install torch` beside the project (it is not a dependency).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

DTYPE = "f16"


# -- the pure part: layer records -> problems ------------------------------------------------------

def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ValueError(f"expected 2 values, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _skip(layer: dict, why: str, skipped: list[str]) -> None:
    skipped.append(f"{layer.get('name') or layer['kind']}: {why}")


def problems(records: Iterable[dict], dtype: str = DTYPE, skipped: list[str] | None = None) -> dict[str, list[dict]]:
    """Layer records -> {family: [problem, ...]}, each distinct problem once, in first-seen order.
    ``skipped`` collects the layers no family runs, each with why."""
    out: dict[str, list[dict]] = {}
    seen: set[tuple[str, str]] = set()
    skipped = [] if skipped is None else skipped

    def add(family: str, problem: dict) -> None:
        k = (family, json.dumps(problem, sort_keys=True))
        if k not in seen:
            seen.add(k)
            out.setdefault(family, []).append(problem)

    for layer in records:
        kind = layer["kind"]
        if kind == "linear":
            shape = list(layer["input"])
            add("gemm", {"m": math.prod(shape[:-1]), "n": int(layer["out_features"]), "k": int(shape[-1]),
                         "dtype": dtype})
            continue
        if kind != "conv2d":
            _skip(layer, f"a {kind} layer: only 2-d convolutions and linear layers map to a family", skipped)
            continue
        if layer.get("groups", 1) != 1:
            _skip(layer, f"groups={layer['groups']}: no grouped or depthwise family", skipped)
            continue
        if layer.get("padding_mode", "zeros") != "zeros":
            _skip(layer, f"padding_mode={layer['padding_mode']!r}: the kernels pad with zeros", skipped)
            continue
        if isinstance(layer["padding"], str):
            _skip(layer, f"padding={layer['padding']!r}: give the padding as numbers", skipped)
            continue
        n, c, h, w = (int(x) for x in layer["input"])
        k = int(layer["out_channels"])
        (r, s), (u, v) = _pair(layer["kernel_size"]), _pair(layer["stride"])
        (ph, pw), (dh, dw) = _pair(layer["padding"]), _pair(layer["dilation"])
        if r == s == u == v and ph == pw == 0 and dh == dw == 1 and r > 1:  # a patch embedding
            p = r
            add("conv_dgrad_patch", {"n": n, "h": h, "w": w, "c": c, "k": k, "p": p, "dtype": dtype})
            add("gemm", {"m": n * (h // p) * (w // p), "n": k, "k": p * p * c, "dtype": dtype})
            continue
        add("conv_direct_fwd", {"n": n, "h": h, "w": w, "c": c, "k": k, "r": r, "s": s,
                                "stride_h": u, "stride_w": v, "pad_h": ph, "pad_w": pw,
                                "dil_h": dh, "dil_w": dw, "dtype": dtype})
    return out


# -- tracing (torch) ------------------------------------------------------------------------------

def trace(model: Any, example_shape: tuple[int, ...]) -> list[dict]:
    """Layer records of every Conv2d, Conv1d/3d and Linear ``model`` calls on an input of
    ``example_shape``, in call order. Runs on the meta device: shapes only."""
    import torch
    from torch import nn

    records: list[dict] = []
    names = {m: name for name, m in model.named_modules()}

    def hook(module, args, _out):
        x = args[0]
        name = names.get(module, type(module).__name__)
        if isinstance(module, nn.Linear):
            records.append({"kind": "linear", "name": name, "input": list(x.shape),
                            "out_features": module.out_features})
        elif isinstance(module, nn.Conv2d):
            records.append({"kind": "conv2d", "name": name, "input": list(x.shape),
                            "out_channels": module.out_channels, "kernel_size": list(module.kernel_size),
                            "stride": list(module.stride),
                            "padding": module.padding if isinstance(module.padding, str) else list(module.padding),
                            "dilation": list(module.dilation), "groups": module.groups,
                            "padding_mode": module.padding_mode})
        else:
            records.append({"kind": type(module).__name__.lower(), "name": name, "input": list(x.shape)})

    kinds = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, kinds)]
    try:
        model = model.to("meta").eval()
        with torch.no_grad():
            model(torch.empty(example_shape, device="meta"))
    finally:
        for h in handles:
            h.remove()
    return records


# -- the shipped models, in plain torch --------------------------------------------------------------

def resnet50(num_classes: int = 1000):
    """ResNet-50 (He et al. 2015, Table 1), bottleneck blocks [3, 4, 6, 3], v1.5 strides."""
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, c_in: int, width: int, stride: int):
            super().__init__()
            c_out = width * 4
            self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(c_out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or c_in != c_out:  # projection shortcut (option B)
                self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(c_out))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + (x if self.downsample is None else self.downsample(x)))

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            stages, c_in = [], 64
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                layers = []
                for i in range(blocks):
                    layers.append(Bottleneck(c_in, width, stride if i == 0 else 1))
                    c_in = width * 4
                stages.append(nn.Sequential(*layers))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet50()


def vit_b16(num_classes: int = 1000, image: int = 224):
    """ViT-B/16 (Dosovitskiy et al. 2020, Table 1): patch 16, 12 blocks, hidden 768, MLP 3072, 12 heads."""
    import torch
    from torch import nn

    dim, depth, heads, mlp, patch = 768, 12, 12, 3072, 16

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).reshape(b, t, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            a = (q @ k.transpose(-2, -1) * (dim // heads) ** -0.5).softmax(-1)  # batched: not a gemm problem
            return self.proj((a @ v).transpose(1, 2).reshape(b, t, dim))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(dim), Attention()
            self.norm2 = nn.LayerNorm(dim)
            self.fc1, self.act, self.fc2 = nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.fc2(self.act(self.fc1(self.norm2(x))))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, num_classes)

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            return self.head(self.norm(self.blocks(x))[:, 0])

    return ViT()


MODELS = {"resnet50": (resnet50, (3, 224, 224)), "vit_b16": (vit_b16, (3, 224, 224))}


def _load(name: str):
    if name in MODELS:
        return MODELS[name]
    mod, sep, attr = name.partition(":")
    if not sep:
        raise SystemExit(f"model {name!r}: one of {', '.join(MODELS)}, or module:callable returning an nn.Module")
    return getattr(importlib.import_module(mod), attr), None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help=f"{', '.join(MODELS)}, or module:callable (returns an nn.Module)")
    ap.add_argument("--batch", type=int, default=8, help="N of the example input (default 8)")
    ap.add_argument("--input", default=None, metavar="N,C,H,W",
                    help="the example input's shape (default for the shipped models: BATCH,3,224,224)")
    ap.add_argument("--dtype", default=DTYPE, help="the problems' dtype (f16, bf16, f32; default f16)")
    ap.add_argument("-o", "--out", default=None, help="write the problems file here (default: stdout)")
    args = ap.parse_args(argv)
    factory, chw = _load(args.model)
    if args.input:
        shape = tuple(int(x) for x in args.input.split(","))
    elif chw is not None:
        shape = (args.batch, *chw)
    else:
        raise SystemExit("--input N,C,H,W is needed for a model of your own")
    skipped: list[str] = []
    doc = problems(trace(factory(), shape), args.dtype, skipped)
    for why in skipped:
        print(f"skipped {why}", file=sys.stderr)
    text = json.dumps(doc, indent=1) + "\n"
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        counts = ", ".join(f"{len(v)} {k}" for k, v in doc.items())
        print(f"{args.out}: {counts} problems ({len(skipped)} layers skipped)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
