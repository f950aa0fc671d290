"""A PEP 517 build backend for this package alone: a wheel of sbqueue/*.py.

pip builds a package in an isolated environment into which it installs the
backend's requirements from an index; this one requires nothing, so
`pip install ./clients/python` works with no index at all.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "sbqueue"
HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=")[1].strip().strip('"')
    raise RuntimeError("no __version__ in %s/__init__.py" % NAME)


def _project():
    """pyproject.toml's [project] (tomllib: Python 3.11 and later)."""
    import tomllib
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _metadata():
    project = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % project["name"], "Version: %s" % _version(),
             "Summary: %s" % project["description"],
             "Requires-Python: %s" % project["requires-python"]]
    lines += ["Requires-Dist: %s" % d for d in project.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def _files():
    pkg = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            yield "%s/%s" % (NAME, name), os.path.join(pkg, name)


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(arc, open(path, "rb").read()) for arc, path in _files()])


def _entry_points():
    scripts = _project().get("scripts", {})
    return ("[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in scripts.items())).encode()


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this directory on sys.path (PEP 660)."""
    return _wheel(wheel_directory, [("%s.pth" % NAME, (HERE + "\n").encode())])


def _wheel(wheel_directory, entries):
    version = _version()
    info = "%s-%s.dist-info" % (NAME, version)
    wheel = "%s-%s-py3-none-any.whl" % (NAME, version)
    entries.append((info + "/METADATA", _metadata().encode()))
    entries.append((info + "/entry_points.txt", _entry_points()))
    entries.append((info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: sbq_build\n"
                    b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    record = "".join("%s,%s,%d\n" % (arc, _digest(data), len(data)) for arc, data in entries)
    record += info + "/RECORD,,\n"
    entries.append((info + "/RECORD", record.encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
        for name in ("pyproject.toml", "sbq_build.py", "README.md"):
            if os.path.exists(os.path.join(HERE, name)):
                t.add(os.path.join(HERE, name), base + "/" + name)
        for arc, full in _files():
            t.add(full, base + "/" + arc)
    return os.path.basename(path)
