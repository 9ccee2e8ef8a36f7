"""The project's own code as one zip, for executors that have the dependencies but not ssekd.

Executors import `ssekd.spark.kafka_source` to read and write Kafka, and `ssekd.catalogs` to check
records against a topic's model. The `ssekd` package is pure Python, so Spark can put a zip of it
on each executor's `sys.path` (`--py-files`, `spark.submit.pyFiles`, `SparkContext.addPyFile`; it
takes `.zip`, not `.whl`). Their dependencies are not in it: confluent-kafka, pyarrow and the
rest are native wheels that must be installed where the executors run (see ssekd/spark/README.md,
"On a cluster"). A zip made from the running code also guarantees that driver and executors run
the same version of it.
"""

from __future__ import annotations

import importlib
import zipfile
from pathlib import Path

#: The packages shipped. Everything the executors import from this project lives in them.
PACKAGES = ("ssekd",)
#: Files of a package that are code or data the code reads at run time.
SUFFIXES = (".py", ".json", ".typed")
#: A fixed time for every entry, so the same code gives the same bytes.
FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def package_root(name: str) -> Path:
    """The folder an installed (or checked-out) package is imported from."""
    module = importlib.import_module(name)
    if module.__file__ is None:
        raise RuntimeError(f"package {name!r} has no folder to pack (a namespace package?)")
    return Path(module.__file__).resolve().parent


def pack_code(output: Path | str) -> Path:
    """Write the zip; returns its path. Entries are sorted and dated alike (reproducible)."""
    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in PACKAGES:
            root = package_root(name)
            for path in sorted(root.rglob("*")):
                if not path.is_file() or path.suffix not in SUFFIXES \
                        or "__pycache__" in path.parts:
                    continue
                entry = zipfile.ZipInfo(f"{name}/{path.relative_to(root).as_posix()}",
                                        FIXED_TIME)
                entry.compress_type = zipfile.ZIP_DEFLATED
                entry.external_attr = 0o644 << 16
                archive.writestr(entry, path.read_bytes())
    return target
