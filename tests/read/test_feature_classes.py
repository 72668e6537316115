"""A dataset's metadata never makes TFDS import code it names, in any form TFDS reads.

Each form below is first shown to be live: TFDS' own `FeatureConnector.from_json` imports
the planted module it names (its import writes a marker file). Then `load` (by directory
and by name) and `rlds-reverb info` (in this process and as a program) refuse the same
metadata, naming the class, and the planted module never runs.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
import tensorflow_datasets as tfds

from rlds_reverb.cli import app
from rlds_reverb.core.errors import SourceError
from rlds_reverb.read import feature_classes
from rlds_reverb.read.loading import load
from tests import builders

_TFDS = 'tensorflow_datasets.core.features.'
_FEATURES_DICT = f'{_TFDS}features_dict.FeaturesDict'
_SEQUENCE = f'{_TFDS}sequence_feature.Sequence'
_TENSOR = f'{_TFDS}tensor_feature.Tensor'
_PROTO_FEATURES_DICT = 'tensorflow_datasets.FeaturesDict'


def _proto_feature(class_name: str) -> dict:
    """A Feature proto (as JSON) of a scalar float tensor, under `class_name`."""
    return {
        'pythonClassName': class_name,
        'tensor': {'shape': {}, 'dtype': 'float32', 'encoding': 'none'},
    }


def _string_content(evil: str) -> dict:
    """The form of the defect: legacy, its `content` a JSON string TFDS parses (proto_cls)."""
    inner = {'features': {'steps': _proto_feature(evil)}}
    return {'type': _FEATURES_DICT, 'proto_cls': _PROTO_FEATURES_DICT, 'content': json.dumps(inner)}


def _proto_dict_content(evil: str) -> dict:
    """Legacy with `proto_cls`, its content a proto as a dict."""
    return {
        'type': _FEATURES_DICT,
        'proto_cls': _PROTO_FEATURES_DICT,
        'content': {'features': {'steps': _proto_feature(evil)}},
    }


def _legacy_dicts(evil: str) -> dict:
    """Legacy dicts all the way down: a FeaturesDict holding a Sequence of the class."""
    sequence = {'type': _SEQUENCE, 'content': {'feature': {'type': evil, 'content': {}}}}
    return {'type': _FEATURES_DICT, 'content': {'steps': {**sequence, 'length': None}}}


def _json_feature(evil: str) -> dict:
    """The proto's `jsonFeature`: a JSON string a FeaturesDict decodes into sub-features."""
    held = {'steps': {'type': evil, 'content': {}}}
    return {'pythonClassName': _FEATURES_DICT, 'jsonFeature': {'json': json.dumps(held)}}


def _snake_case_proto(evil: str) -> dict:
    """The proto as JSON with the original field names (protobuf's parser takes both)."""
    inner = {'python_class_name': evil, 'tensor': {'shape': {}, 'dtype': 'float32'}}
    return {
        'python_class_name': _FEATURES_DICT,
        'features_dict': {'features': {'steps': inner}},
    }


def _nested_sequence(evil: str) -> dict:
    """Proto JSON: a FeaturesDict, a Sequence, a FeaturesDict, then the class."""
    steps = {'featuresDict': {'features': {'reward': _proto_feature(evil)}}}
    steps['pythonClassName'] = _FEATURES_DICT
    sequence = {'pythonClassName': _SEQUENCE, 'sequence': {'feature': steps, 'length': '-1'}}
    return {'pythonClassName': _FEATURES_DICT, 'featuresDict': {'features': {'steps': sequence}}}


def _string_in_string(evil: str) -> dict:
    """A string content whose FeaturesDict holds a `jsonFeature`: JSON in JSON in JSON."""
    held = {'pythonClassName': _FEATURES_DICT, 'jsonFeature': {'json': json.dumps({
        'steps': {'type': evil, 'content': {}}})}}  # fmt: skip
    inner = {'features': {'steps': held}}
    return {'type': _FEATURES_DICT, 'proto_cls': _PROTO_FEATURES_DICT, 'content': json.dumps(inner)}


_FORMS = {
    'string_content': _string_content,
    'proto_dict_content': _proto_dict_content,
    'legacy_dicts': _legacy_dicts,
    'json_feature': _json_feature,
    'snake_case_proto': _snake_case_proto,
    'nested_sequence': _nested_sequence,
    'string_in_string': _string_in_string,
}


def _plant(directory: pathlib.Path, name: str) -> pathlib.Path:
    """Writes module `name`, whose import creates a marker file; returns the marker."""
    marker = directory / f'{name}.ran'
    (directory / f'{name}.py').write_text(f'open({str(marker)!r}, "w").close()\n')
    return marker


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """`planted(name) -> (class name, marker)`: a module on sys.path that TFDS could import."""
    modules = tmp_path / 'modules'
    modules.mkdir()
    monkeypatch.syspath_prepend(str(modules))

    def _make(name: str) -> tuple[str, pathlib.Path]:
        return f'{name}.Evil', _plant(modules, name)

    return _make


def _toy_dataset(root: pathlib.Path) -> pathlib.Path:
    return builders.write_tfds(root, [builders.episode(3)], name='toy')


@pytest.mark.parametrize('form', list(_FORMS))
def test_tfds_itself_imports_the_class_each_form_names(planted, form):
    evil, marker = planted(f'planted_tfds_{form}')
    with pytest.raises(Exception):  # noqa: B017  (the planted module defines no class)
        tfds.features.FeatureConnector.from_json(_FORMS[form](evil))
    assert marker.exists(), 'the form is not one TFDS reads: the test proves nothing'


@pytest.mark.parametrize('form', list(_FORMS))
def test_load_refuses_each_form_and_never_imports_it(tmp_path, planted, form):
    evil, marker = planted(f'planted_{form}')
    directory = _toy_dataset(tmp_path / 'data')
    (directory / 'features.json').write_text(json.dumps(_FORMS[form](evil)))
    with pytest.raises(SourceError, match=rf'{evil}, which are not TFDS features'):
        load(directory)
    with pytest.raises(SourceError, match=rf'{evil}, which are not TFDS features'):
        load('toy', data_dir=tmp_path / 'data')
    assert not marker.exists()


def test_the_string_form_in_dataset_info_is_refused(tmp_path, planted):
    evil, marker = planted('planted_info_string')
    directory = _toy_dataset(tmp_path)
    info = json.loads((directory / 'dataset_info.json').read_text())
    info['features'] = _string_content(evil)
    (directory / 'dataset_info.json').write_text(json.dumps(info))
    (directory / 'features.json').unlink()
    with pytest.raises(
        SourceError, match=rf'dataset_info.json names the feature class\(es\) {evil}'
    ):
        load(directory)
    assert not marker.exists()


def test_a_dataset_under_a_config_directory_is_checked_before_tfds_opens_it(tmp_path, planted):
    evil, marker = planted('planted_config')
    directory = _toy_dataset(tmp_path / 'scratch')
    target = tmp_path / 'data' / 'toy' / 'config' / '1.0.0'
    shutil.copytree(directory, target)
    (target / 'features.json').write_text(json.dumps(_string_content(evil)))
    with pytest.raises(SourceError):
        load('toy', data_dir=tmp_path / 'data')
    assert not marker.exists()


def test_info_never_imports_the_string_form_in_process(tmp_path, planted, run_cli):
    evil, marker = planted('planted_info_cli')
    directory = _toy_dataset(tmp_path)
    (directory / 'features.json').write_text(json.dumps(_string_content(evil)))
    code, _, err = run_cli('info', directory)
    assert code == app.EXIT_ERROR
    assert f'{evil}, which are not TFDS features' in err
    assert not marker.exists()


def test_info_never_imports_the_string_form_as_a_program(tmp_path, run_cli, subprocess_env):
    modules = tmp_path / 'modules'
    modules.mkdir()
    marker = _plant(modules, 'planted_info_program')
    directory = _toy_dataset(tmp_path)
    evil = 'planted_info_program.Evil'
    (directory / 'features.json').write_text(json.dumps(_string_content(evil)))
    env = dict(subprocess_env)
    env['PYTHONPATH'] = os.pathsep.join([str(modules), env['PYTHONPATH']])
    code, _, err = run_cli('info', directory, subprocess=True, timeout=180, env=env)
    assert code == app.EXIT_ERROR
    assert f'{evil}, which are not TFDS features' in err
    assert not marker.exists()


def test_list_feature_classes_reads_every_form_without_tfds():
    for form, make in _FORMS.items():
        assert 'x.Evil' in feature_classes.list_feature_classes(make('x.Evil')), form
    assert feature_classes.list_feature_classes({'description': 'not {json'}) == []
    deep: dict = {'pythonClassName': 'a.B'}
    for _ in range(5_000):  # Deeper than the recursion limit: read without recursing.
        deep = {'featuresDict': {'features': {'x': deep}}}
    assert feature_classes.list_feature_classes(deep) == ['a.B']
