"""Tests for tfmp/run/task_loader.py: `load("MODULE:NAME")`, one line per mistake, and sys.path left as it was."""

import re
import sys

import pytest

from tfmp.run import config as config_lib
from tfmp.run import shipped, task_loader

MODULE = """
import keras
from tfmp.run import tasks

def build():
    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Dense(3, activation="softmax", dtype="float32")(x))

TASK = tasks.SupervisedTask(build, (None, None), loss="mse", name="listed")
NOT_A_TASK = 42
TEXT = "TASK"
MODEL = build()

class NotATask:
    pass

def make_task():
    return TASK

def needs_an_argument(config):
    return TASK

class MyTask(tasks.SupervisedTask):
    def __init__(self):
        super().__init__(build, (None, None), loss="mse", name="subclassed")
"""


@pytest.mark.parametrize(
    "name, error",
    [
        ("no_colon", "task: must be MODULE:NAME"),
        ("no_such_module_xyz:TASK", "no module 'no_such_module_xyz' on the Python path"),
        ("{file}:MISSING", "has no attribute 'MISSING'. It defines these tasks: TASK"),
        ("{file}:NOT_A_TASK", "NOT_A_TASK is an int (42), not a Task; NAME must be a tfmp.run.tasks.Task"),
        ("{file}:TEXT", "TEXT is a str ('TASK'), not a Task; NAME must be"),
        ("{file}:MODEL", "MODEL is a Functional model (a keras.Model), not a Task; give the function that builds"),
        (
            "{file}:build",
            "build is a function that returned a Functional model (a keras.Model), not a Task; give the function "
            "that builds the model to tfmp.run.tasks.SupervisedTask(model=",
        ),
        ("{file}:NotATask", "NotATask is a class (NotATask) that is not a Task subclass; NAME must be"),
        ("tfmp.run.tasks:Task", "Task is an abstract Task subclass (it lacks build_trainer, train_data)"),
        ("{file}:needs_an_argument", "is a function that takes arguments"),
        ("/no/such/file.py:TASK", "no such file '/no/such/file.py'"),
    ],
)
def test_load_names_the_value_and_what_name_must_be(name, error, tmp_path):
    path = tmp_path / "user_tasks_errors.py"
    path.write_text(MODULE)
    spec = name.format(file=path)
    with pytest.raises(config_lib.ConfigError, match=re.escape(error)) as raised:
        task_loader.load(spec)
    assert str(raised.value).startswith("task: ") and str(raised.value).endswith(f" Received: task={spec!r}")
    assert "\n" not in str(raised.value) and " is a int" not in str(raised.value)


def test_load_names_what_a_function_returned_in_full(tmp_path):
    path = tmp_path / "user_tasks_returned.py"
    path.write_text(MODULE)
    with pytest.raises(config_lib.ConfigError) as raised:
        task_loader.load(f"{path}:build")
    assert str(raised.value) == (
        "task: build is a function that returned a Functional model (a keras.Model), not a Task; give the function "
        "that builds the model to tfmp.run.tasks.SupervisedTask(model=..., train_data=..., loss=...) and name that "
        f"task. Received: task='{path}:build'"
    )


@pytest.mark.parametrize(
    "source, error",
    [
        ("x = 1\ny = 2\ndef broken(:\n", "line 3: SyntaxError: invalid syntax."),
        ("if True:\nx = 1\n", "line 2: IndentationError: expected an indented block after 'if' statement on line 1."),
        (
            "import os\nimport no_such_module_for_tfmp_tests\n",
            "line 2: ModuleNotFoundError: No module named 'no_such_module_for_tfmp_tests'; install "
            "'no_such_module_for_tfmp_tests' or fix the import.",
        ),
        ("\n\nfrom os import no_such_name\n", "line 3: ImportError: cannot import name 'no_such_name' from 'os'"),
    ],
    ids=["syntax", "indentation", "missing-module", "missing-name"],
)
def test_a_task_file_that_does_not_import_is_one_line_naming_the_file_the_line_and_the_error(
    source, error, tmp_path, monkeypatch
):
    name = f"user_tasks_broken_{abs(hash(source))}"
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    spec = f"examples/{name}.py:TASK"
    with pytest.raises(config_lib.ConfigError) as raised:
        task_loader.load(spec)
    message = str(raised.value)
    assert message.startswith(f"task: examples/{name}.py {error}") and message.endswith(f" Received: task={spec!r}")
    assert "\n" not in message
    # By module name too (the folder on the path): the same file and line.
    monkeypatch.syspath_prepend(str(tmp_path / "examples"))
    with pytest.raises(config_lib.ConfigError) as raised:
        task_loader.load(f"{name}:TASK")
    assert str(raised.value).startswith(f"task: examples/{name}.py {error}")


def test_load_takes_a_task_a_subclass_or_a_function_from_a_module_or_a_file(tmp_path, monkeypatch):
    path = tmp_path / "user_tasks_ok.py"
    path.write_text(MODULE)
    assert task_loader.load(f"{path}:TASK").name == "listed"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert task_loader.load("user_tasks_ok:make_task").name == "listed"
    assert task_loader.load("user_tasks_ok:MyTask").name == "subclassed"
    assert isinstance(task_loader.load("tfmp.run.shipped:GANTask"), shipped.GANTask)


def test_a_task_file_is_imported_without_changing_sys_path_and_a_fresh_process_can_import_it_again(tmp_path):
    folder = tmp_path / "user_folder"
    folder.mkdir()
    (folder / "user_helpers_neighbour.py").write_text("NAME = 'from the neighbour'\n")
    (folder / "user_tasks_path.py").write_text(MODULE + "from user_helpers_neighbour import NAME\n")
    before = list(sys.path)
    task = task_loader.load(f"{folder / 'user_tasks_path.py'}:TASK")
    assert task.name == "listed" and sys.path == before  # its folder: on the path only while importing
    assert task_loader.imported_files()["user_tasks_path"] == str(folder / "user_tasks_path.py")
    assert task_loader.load(f"{folder / 'user_tasks_path.py'}:TASK") is task  # imported once
    del sys.modules["user_tasks_path"]
    task_loader.import_files(task_loader.imported_files())
    assert sys.modules["user_tasks_path"].TASK.name == "listed"
