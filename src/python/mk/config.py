"""Merge configurations as objects (mergekit.config's names).

MergeConfiguration and the objects it holds (InputModelDefinition,
InputSliceDefinition, OutputSliceDefinition, OutputModuleDefinition,
ConditionalParameter, TokenizerConfig and its token embeddings) have
mergekit 0.1.5's fields, defaults and rules, and dump to the same data and
the same YAML.  model_validate checks structure only, listing every
problem at once in one ConfigError; validate() runs libmk's planner, which
opens the models and checks architectures and parameters.
"""
import ctypes
import logging
import numbers

import yaml

from ._lib import _Diags, _Err, _RunOpts, _diag_lines, _load
from .common import (_BAD, _REQUIRED, ModelPath, ModelReference, _bool, _Field, _float, _Issues, _kind, _list,
                     _literal, _mapping, _Model, _model, _model_ref, _optional, _pair, _str, _int)
from .errors import ConfigError

log = logging.getLogger("mk")

__all__ = ["MergeConfiguration", "InputModelDefinition", "InputSliceDefinition", "OutputSliceDefinition",
           "OutputModuleDefinition", "ConditionalParameter", "TokenizerConfig", "TokenEmbeddingConfig",
           "ModelTokenEmbedding", "ZeroEmbedding", "ConfigReader", "ConfigYamlDumper", "ModelReference",
           "ModelPath", "evaluate_setting", "validate", "ScalarParameter", "ScalarOrGradient",
           "ParameterSetting"]

# the shapes of parameter values, for annotations (mergekit's aliases)
ScalarParameter = (bool, int, float, str)
ScalarOrGradient = ScalarParameter + (list,)
ParameterSetting = ScalarOrGradient + (dict,)


def _scalar(v, path, issues):
    # bool, int, float and str keep their type (1 stays 1, "1e-3" stays text)
    for t in (bool, str, numbers.Integral, numbers.Real):
        if isinstance(v, t):
            return {numbers.Integral: int, numbers.Real: float}.get(t, t)(v)
    issues.add(path, "expected a number, a boolean or a string, got %s" % _kind(v))
    return _BAD


def _scalar_or_gradient(v, path, issues):
    if isinstance(v, (list, tuple)):
        return [_scalar(x, path + (i,), issues) for i, x in enumerate(v)]
    return _scalar(v, path, issues)


class ConditionalParameter(_Model):
    """A parameter's value for the tensors whose names contain filter (all
    of them when filter is None or "*")."""


ConditionalParameter._fields = (_Field("value", _scalar_or_gradient, _REQUIRED),
                                _Field("filter", _optional(_str)))


def _setting(v, path, issues):
    """A parameter setting: a scalar, a gradient (list of scalars), a
    ConditionalParameter or a list of them."""
    if isinstance(v, (ConditionalParameter, dict)):
        return _model(ConditionalParameter)(v, path, issues)
    if isinstance(v, (list, tuple)):
        conds = [isinstance(x, (ConditionalParameter, dict)) for x in v]
        if all(conds):
            return [_model(ConditionalParameter)(x, path + (i,), issues) for i, x in enumerate(v)]
        if not any(conds):
            return [_scalar(x, path + (i,), issues) for i, x in enumerate(v)]
        issues.add(path, "a list mixes {value, filter} entries with plain values")
        return _BAD
    if isinstance(v, (bool, int, float, str)):
        return _scalar(v, path, issues)
    issues.add(path, "expected a number, a boolean, a string, a list of them (a gradient), "
               "or {value, filter} entries; got %s" % _kind(v))
    return _BAD


_parameters = _optional(_mapping(_setting))


class InputSliceDefinition(_Model):
    """One source of an output slice: a model's layers [start, end)."""


InputSliceDefinition._fields = (_Field("model", _model_ref, _REQUIRED), _Field("layer_range", _pair(_int), _REQUIRED),
                                _Field("parameters", _parameters))


class InputModelDefinition(_Model):
    """One model of a merge, with its own parameters."""


InputModelDefinition._fields = (_Field("model", _model_ref, _REQUIRED), _Field("parameters", _parameters))


class OutputSliceDefinition(_Model):
    """One slice of the output: its sources merged layer by layer."""


OutputSliceDefinition._fields = (_Field("sources", _list(_model(InputSliceDefinition)), _REQUIRED),
                                 _Field("base_model", _optional(_model_ref)),
                                 _Field("residual_weight", _optional(_float)), _Field("parameters", _parameters))


class OutputModuleDefinition(_Model):
    """One module of a multi-module model: slices or models, not both."""

    def _check(self, path, issues):
        if bool(self.slices) == bool(self.models):
            issues.add(path, "give either slices or models (one of them, not empty)")


OutputModuleDefinition._fields = (_Field("slices", _optional(_list(_model(OutputSliceDefinition)))),
                                  _Field("models", _optional(_list(_model(InputModelDefinition)))),
                                  _Field("parameters", _parameters))


class ModelTokenEmbedding(_Model):
    """A token's embedding taken from a model's row, by token_id or token."""

    _frozen = True

    def _check(self, path, issues):
        if self.token_id is None and self.token is None:
            issues.add(path, "give token_id or token")
        elif self.token_id is not None and self.token is not None:
            issues.add(path, "give token_id or token, not both")


ModelTokenEmbedding._fields = (_Field("kind", _literal("model_token"), _REQUIRED),
                               _Field("model", _model_ref, _REQUIRED), _Field("token_id", _optional(_int)),
                               _Field("token", _optional(_str)))


class ZeroEmbedding(_Model):
    """A token's embedding set to zeros."""

    _frozen = True


ZeroEmbedding._fields = (_Field("kind", _literal("zero"), _REQUIRED),)


def _embedding_source(v, path, issues):
    if v is None or isinstance(v, (ModelTokenEmbedding, ZeroEmbedding, ModelReference)):
        return v
    if isinstance(v, dict) and "kind" in v:
        cls = {"model_token": ModelTokenEmbedding, "zero": ZeroEmbedding}.get(v["kind"])
        if cls is None:
            issues.add(path + ("kind",), "expected 'model_token' or 'zero', got %s" % _kind(v["kind"]))
            return _BAD
        return cls._build(v, path, issues)
    return _model_ref(v, path, issues)


class TokenEmbeddingConfig(_Model):
    """Where one token's embedding comes from; force also overrides it
    where the models have the token."""

    _frozen = True


TokenEmbeddingConfig._fields = (_Field("source", _embedding_source), _Field("force", _bool, False))


def _tokenizer_source(v, path, issues):
    """"union", "base" or a model."""
    if isinstance(v, str) and v in ("union", "base"):
        return str(v)
    return _model_ref(v, path, issues)


class TokenizerConfig(_Model):
    """The output's tokenizer: a union of the models' vocabularies, the
    base model's, or one model's; tokens' embeddings; padding."""

    _frozen = True


TokenizerConfig._fields = (_Field("source", _tokenizer_source, "union"),
                           _Field("tokens", _optional(_mapping(_model(TokenEmbeddingConfig)))),
                           _Field("pad_to_multiple_of", _optional(_int)))


class ConfigYamlDumper(yaml.Dumper):
    """PyYAML's Dumper, writing a list of numbers on one line ([0, 0.5, 1])."""


def _represent_list(dumper, data):
    numbers = all(isinstance(x, (int, float)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=numbers)


ConfigYamlDumper.add_representer(list, _represent_list)


def _yaml_marks(text):
    """path -> (line, column) of each node of a YAML text (1-based)."""
    marks = {}

    def walk(node, path):
        marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                walk(v, path + (k.value,))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, path + (i,))
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    if root is not None:
        walk(root, ())
    return marks


class MergeConfiguration(_Model):
    """A merge: exactly one of models, slices or modules; merge_method; an
    optional base_model, dtype, out_dtype, tokenizer_source or tokenizer
    (not both), chat_template and parameters."""

    def _check(self, path, issues):
        given = [n for n in ("models", "slices", "modules") if getattr(self, n)]
        if len(given) != 1:
            issues.add(path, "give exactly one of models, slices or modules (%s)" % (
                "none is given" if not given else " and ".join(given) + " are given"))
        if self.tokenizer_source and self.tokenizer:
            issues.add(path + ("tokenizer",), "give tokenizer_source or tokenizer, not both")

    @classmethod
    def from_yaml(cls, text, label="config.yml"):
        """From YAML text (an mk extra).  The text itself is what a merge
        writes into mergekit_config.yml, as mergekit-yaml writes it, unless
        the object is changed afterwards."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = label + (":%d:%d" % (mark.line + 1, mark.column + 1) if mark else "")
            msg = "error: %s: not YAML: %s" % (where, getattr(e, "problem", None) or e)
            raise ConfigError(msg, [msg]) from None
        issues = _Issues(label, _yaml_marks(text))
        self = cls._build(data, (), issues)
        issues.raise_if_any()
        self._text, self._label = text, label
        self._snapshot = self.model_dump_json()
        return self

    def to_yaml(self):
        """The configuration as mergekit writes it: model_dump(mode="json",
        exclude_defaults=True) through PyYAML, keys sorted, lists of numbers
        on one line, no trailing newline."""
        return yaml.dump(self.model_dump(mode="json", exclude_defaults=True), Dumper=ConfigYamlDumper).rstrip()

    def referenced_models(self):
        """Every model the configuration names, each once (in the order
        first named: base_model, models, slices' sources, modules')."""
        seen = {}

        def add(m):
            if m:
                seen.setdefault(m, None)
        add(self.base_model)
        for m in self.models or ():
            add(m.model)
        for s in self.slices or ():
            for src in s.sources:
                add(src.model)
        for mod in (self.modules or {}).values():
            for m in mod.models or ():
                add(m.model)
            for s in mod.slices or ():
                for src in s.sources:
                    add(src.model)
        return list(seen)

    def _source(self, config_source=None):
        """(text, label): what libmk is handed, and a merge writes into
        mergekit_config.yml and the card.  config_source (run_merge's) when
        it holds this configuration; else the YAML this was made from while
        unchanged; else to_yaml(), as mergekit's run_merge writes."""
        now = self.model_dump_json()
        if config_source:
            try:
                same = MergeConfiguration.from_yaml(config_source, "config_source").model_dump_json() == now
            except ConfigError:
                same = False
            if same:
                return config_source, "config_source"
            log.warning("run_merge: config_source is not this configuration; its to_yaml() is merged instead")
        text = self.__dict__.get("_text")
        if text is not None and self.__dict__.get("_snapshot") == now:
            return text, self._label
        return self.to_yaml(), "config"


MergeConfiguration._fields = (
    _Field("modules", _optional(_mapping(_model(OutputModuleDefinition)))),
    _Field("slices", _optional(_list(_model(OutputSliceDefinition)))),
    _Field("models", _optional(_list(_model(InputModelDefinition)))),
    _Field("merge_method", _str, _REQUIRED),
    _Field("base_model", _optional(_model_ref)),
    _Field("dtype", _optional(_str)),
    _Field("tokenizer_source", _optional(_tokenizer_source)),
    _Field("tokenizer", _optional(_model(TokenizerConfig))),
    _Field("chat_template", _optional(_str)),
    _Field("out_dtype", _optional(_str)),
    _Field("parameters", _parameters),
)


class ConfigReader(_Model):
    """A view of a configuration at one point: the interpolation position t,
    the output slice and module being merged."""

    @property
    def base_model(self):
        if self.slice_out is not None and self.slice_out.base_model:
            return self.slice_out.base_model
        return self.config.base_model

    def for_out_slice(self, slice):
        return self.model_copy(update={"slice_out": slice})

    def with_t(self, t):
        return self.model_copy(update={"t": t})

    def parameter_sources(self, model=None):
        """The parameter mappings that apply, most specific first (not
        resolved): the slice's source for model, the slice, the module, the
        configuration."""
        if self.slice_out is not None:
            if model is not None:
                for src in self.slice_out.sources:
                    if src.model == model:
                        yield src.parameters
            yield self.slice_out.parameters
        if self.module is not None:
            yield self.module.parameters
        yield self.config.parameters


ConfigReader._fields = (_Field("config", _model(MergeConfiguration), _REQUIRED), _Field("t", _float, _REQUIRED),
                        _Field("slice_out", _optional(_model(OutputSliceDefinition))),
                        _Field("module", _optional(_model(OutputModuleDefinition))))


def evaluate_setting(tensor_name, setting, t=0, *, validate):
    """A setting's value for one tensor at position t in [0, 1]: the first
    ConditionalParameter whose filter matches the name (None and "*" match
    every name); a gradient's value interpolated between its two nearest
    points when its values are numbers, else the point at or below t.
    validate turns a raw value into the parameter's type.  None when
    nothing matches."""
    if isinstance(setting, ConditionalParameter):
        setting = [setting]
    if isinstance(setting, (bool, int, float, str)):
        return validate(setting)
    if not isinstance(setting, list):
        raise RuntimeError("Unexpected setting value: %r" % (setting,))
    if not setting:
        return None
    if all(isinstance(x, (bool, int, float, str)) for x in setting):
        vals = [validate(x) for x in setting]
        pos = t * (len(vals) - 1)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
            return vals[int(pos)]
        lo = int(pos)
        hi = min(len(vals) - 1, lo + 1)
        f = pos - lo
        return validate((1 - f) * vals[lo] + f * vals[hi])
    for c in setting:
        if c.filter is None or c.filter == "*" or (tensor_name and c.filter in tensor_name):
            return evaluate_setting(tensor_name, c.value, t, validate=validate)
    return None


def validate(config):
    """Every diagnostic of a configuration (a MergeConfiguration, a dict or
    YAML text) as lines, from libmk's planner: the models are opened, their
    architectures and the method's parameters checked.  Raises ConfigError
    when there are errors."""
    if isinstance(config, str):
        text, label = config, "config.yml"
    else:
        if not isinstance(config, MergeConfiguration):
            config = MergeConfiguration.model_validate(config)
        text, label = config._source()
    lib = _load()
    raw = text.encode()
    o = _RunOpts(text=raw, len=len(raw), label=label.encode())
    d, e = _Diags(), _Err()
    rc = lib.mk_validate_config(ctypes.byref(o), ctypes.byref(d), ctypes.byref(e))
    lines = _diag_lines(lib, d)
    lib.mk_diags_free(ctypes.byref(d))
    if rc:
        errs = [x for x in lines if x.startswith("error: ")]
        raise ConfigError("\n".join(errs) if errs else e.msg.decode("utf-8", "replace"), lines)
    return lines
