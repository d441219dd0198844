"""Reads the report of `pip install --dry-run --report FILE -r requirements.lock`
(`make check-install`) and says what a machine whose pip reaches PyPI alone would
install: for which Python and platform, how many packages, which build of torch
and which CUDA packages it brings, every version that is not the lock's, and the
download size. Fails (exit 1) when a version differs from the lock, when a package
outside the lock is not one torch brings, or when a file is not on the index.

Sizes come from the index's JSON pages (PEP 691, `size` of PEP 700): pip's report
has none. Standard library only: it runs with the interpreter `make setup` picks,
before any venv exists.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TIMEOUT_S = 60
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# The packages torch's CUDA build brings and the lock leaves out (see its header).
CUDA_ONLY = re.compile(r"^(nvidia-(?!ml-py$).*|cuda-.*|triton)$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(path: Path) -> dict[str, list[tuple[str, str]]]:
    """name -> [(version, marker)]: a universal lock may pin one name twice, each
    version under its own marker."""
    pins: dict[str, list[tuple[str, str]]] = {}
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement, _, marker = line.partition(";")
        name, _, version = requirement.partition("==")
        pins.setdefault(normalized(name.split("[")[0]), []).append(
            (version.strip(), marker.strip()))
    return pins


def brought_by(root: str, install: dict[str, dict]) -> set[str]:
    """The resolved packages that `root` requires, directly or further down (every
    Requires-Dist followed, markers ignored: it only says who brought a package)."""
    seen, todo = set(), [root]
    while todo:
        item = install.get(todo.pop())
        for req in (item or {}).get("metadata", {}).get("requires_dist", []):
            name = normalized(NAME.match(req)[1])
            if name in install and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


class Resolution:
    """What pip's report resolved, held against the lock: `failures` is empty when
    every locked package got its locked version and every other one is a CUDA
    package that torch brings."""

    def __init__(self, report: dict, pins: dict[str, list[tuple[str, str]]]):
        self.install = {normalized(i["metadata"]["name"]): i for i in report["install"]}
        self.version = {name: i["metadata"]["version"] for name, i in self.install.items()}
        self.differ = [f"{name} {self.version[name]} (the lock: "
                       f"{' or '.join(v + (f' ; {m}' if m else '') for v, m in pins[name])})"
                       for name in sorted(self.install) if name in pins
                       and self.version[name] not in [v for v, _ in pins[name]]]
        self.unresolved = sorted(name for name, lines in pins.items() if name not in self.install
                                 and any(not marker for _, marker in lines))
        self.left_out = sorted(name for name in pins
                               if name not in self.install and name not in self.unresolved)
        torch_brings = brought_by("torch", self.install)
        self.cuda = sorted(name for name in self.install if name not in pins
                           and name in torch_brings and CUDA_ONLY.match(name))
        self.outside = sorted(name for name in self.install
                              if name not in pins and name not in self.cuda)
        self.failures = [
            *(f"differs from the lock: {d}" for d in self.differ),
            *(f"in the lock for every platform but not resolved: {n}" for n in self.unresolved),
            *(f"not in the lock and not a CUDA package of torch: {n} {self.version[n]}"
              for n in self.outside)]


def index_page(index: str, name: str) -> dict:
    request = urllib.request.Request(
        f"{index.rstrip('/')}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return json.load(response)


def file_size(index: str, name: str, url: str) -> int:
    """The size of the file at `url` as the index lists it for `name`; raises
    LookupError when the index's page of `name` does not list that file."""
    for entry in index_page(index, name)["files"]:
        if entry["url"] == url or urllib.parse.urljoin(f"{index}/{name}/", entry["url"]) == url:
            if entry.get("size") is not None:
                return int(entry["size"])
            head = urllib.request.Request(url, method="HEAD")
            with urllib.request.urlopen(head, timeout=TIMEOUT_S) as response:
                return int(response.headers["Content-Length"])
    raise LookupError(f"{name}: {url} is not on {index}/{name}/")


def gb(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:.2f} GB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="pip's --report JSON")
    parser.add_argument("lock", type=Path, help="requirements.lock")
    parser.add_argument("--index", default="https://pypi.org/simple",
                        help="the index the resolution used (sizes are read from it)")
    args = parser.parse_args(argv)

    report = json.loads(args.report.read_text())
    env = report["environment"]
    resolution = Resolution(report, lock_pins(args.lock))
    install, version, cuda = resolution.install, resolution.version, resolution.cuda
    print(f"Resolved for {env['platform_python_implementation']} {env['python_full_version']} on "
          f"{env['platform_system']} {env['platform_machine']} (pip {report['pip_version']}), "
          f"from {args.index} alone")
    print(f"{len(install)} packages: {len(install) - len(cuda) - len(resolution.outside)} from the "
          f"lock, {len(cuda)} CUDA packages that torch brings (not in the lock), "
          f"{len(resolution.outside)} others")
    print(f"Lock lines whose markers leave them out here: {len(resolution.left_out)}"
          + (f" ({', '.join(resolution.left_out)})" if resolution.left_out else ""))
    if "torch" in install:
        url = install["torch"]["download_info"]["url"]
        host = urllib.parse.urlparse(url).netloc
        build = "PyPI's build" if host == "files.pythonhosted.org" else "not PyPI's build"
        print(f"torch {version['torch']}: {build} ({host}: {url.rsplit('/', 1)[-1]})")
        print("  its CUDA packages: " + (", ".join(f"{n} {version[n]}" for n in cuda) or "none"))
    print("Versions that differ from the lock: " + ("; ".join(resolution.differ) or "none"))
    failures = list(resolution.failures)

    urls = {name: i["download_info"]["url"] for name, i in install.items()}
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            sizes = dict(zip(urls, pool.map(
                lambda name: file_size(args.index, name, urls[name]), urls)))
    except (OSError, LookupError, KeyError, ValueError) as error:
        failures.append(f"the download sizes could not be read from {args.index}: {error}")
    else:
        torch_part = sum(sizes[n] for n in ["torch", *cuda] if n in sizes)
        print(f"Download: {gb(sum(sizes.values()))} in {len(sizes)} files; torch and its CUDA "
              f"packages {gb(torch_part)}, the rest {gb(sum(sizes.values()) - torch_part)}")
        largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
        print("  largest: " + ", ".join(f"{n} {sizes[n] / 1e6:.0f} MB" for n in largest))

    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    if not failures:
        print(f"OK: {args.lock.name} resolves from {args.index} alone to the lock's versions")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
