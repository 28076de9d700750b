"""setup.cfg lists every package of the source tree, under the name it is installed as."""

import configparser
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup_cfg():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    return parser


def _lines(value):
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_setup_cfg_lists_every_package_of_the_tree():
    options = _setup_cfg()["options"]
    package_dir = dict(line.replace(" ", "").split("=") for line in _lines(options["package_dir"]))
    roots = {"tfmp": "tfmp", **package_dir}  # installed name -> folder
    found = set()
    for name, folder in roots.items():
        for directory, subdirectories, files in os.walk(os.path.join(ROOT, folder)):
            subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
            if "__init__.py" in files:
                relative = os.path.relpath(directory, os.path.join(ROOT, folder))
                found.add(name if relative == "." else f"{name}.{relative.replace(os.sep, '.')}")
    assert set(_lines(options["packages"])) == found


def test_the_type_hints_marker_ships():
    package_data = _setup_cfg()["options.package_data"]
    assert os.path.isfile(os.path.join(ROOT, "tfmp", "py.typed"))
    assert [pattern.strip() for pattern in package_data["tfmp"].split(",")] == ["py.typed"]
