#!/usr/bin/env python3
"""ctest's layer check: every #include "..." of the project's own headers points down or sideways
within its folder, never up (docs/design.md, "Layers"). A folder's rank is in LAYERS below; a file
may include headers of its own folder and of folders of a lower rank, nothing else. Run:
    tests/check_layers.py REPO_ROOT
A wrong-way include prints "FILE:LINE: FOLDER (rank R) includes HEADER of FOLDER (rank S)" and the
check fails. Adding a folder means adding it here, at the rank of what it may include."""
import pathlib
import re
import sys

# Lowest first. Folders of one rank must not include each other.
LAYERS = [
    ["kernels/base"],  # Result, FT_ASSERT, Philox, DType: what every layer uses
    ["kernels"],  # the backends (CPU, CUDA)
    ["core/util"],  # fields, files, strict JSON, SHA-256
    ["core/dist"],  # the processes of a training job (MPI)
    ["core/text", "core/model", "core/store"],  # tokenizers; the model; the run store
    ["core/io"],  # checkpoint and model-file formats
    ["core/data", "core/sample"],  # token files; sampling
    ["core/eval"],  # metrics, Figure 4, benchmarks
    ["core/train"],  # runs: configs, the trainer, bundles
    ["core/explore", "core/session"],  # what the studio asks of core
    ["datasets"],  # the datasets' registry
    ["views"],  # the studio's widgets
    ["app"],  # the programs
]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path: str):
    """The deepest folder of LAYERS that holds `path` (a repository-relative path)."""
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        if "/".join(parts[:n]) in RANK:
            return "/".join(parts[:n])
    return None


def main(root: pathlib.Path) -> int:
    bad = 0
    sources = [p for top in ("app", "core", "datasets", "kernels", "views") for p in (root / top).rglob("*")
               if p.suffix in (".cpp", ".h", ".cu")]
    for path in sorted(sources):
        rel = path.relative_to(root).as_posix()
        mine = folder_of(rel)
        if mine is None:
            print(f"{rel}: its folder has no layer in tests/check_layers.py")
            bad += 1
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            theirs = folder_of(m.group(1))
            if theirs is None or theirs == mine:
                continue  # a system header, a test header, or one of its own folder
            if RANK[theirs] >= RANK[mine]:
                print(f"{rel}:{number}: {mine} (rank {RANK[mine]}) includes {m.group(1)} of {theirs} "
                      f"(rank {RANK[theirs]})")
                bad += 1
    if bad:
        print(f"{bad} include(s) against the layers (tests/check_layers.py)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
