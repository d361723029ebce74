"""Model architectures (mergekit.architecture's names): which weights a
model has.

The definitions are libmk's (the architecture files embedded in it, or
the one it infers from the models' tensor names), not a copy in Python:
get_architecture_info plans the configuration as mk-yaml would
(mk_arch_describe(3)) and returns the output's ModelArchitecture, whose
all_weights(config) lists the WeightInfo of every tensor for a model
config (a transformers PretrainedConfig, a dict as config.json holds, or
None for the base model's).
"""
import json

from .._describe import arch_json
from ..options import MergeOptions

__all__ = ["ModelArchitecture", "ModuleArchitecture", "ModuleDefinition", "ConfiguredModuleArchitecture",
           "ConfiguredModelArchitecture", "WeightInfo", "get_architecture_info"]


class WeightInfo:
    """One tensor of a model: name, vocabulary_axis (0 for the rows
    indexed by token ids, else None), optional, aliases, force_dtype,
    tied_names (mergekit's fields); is_embed (older mergekit's) says
    whether vocabulary_axis is set.  Frozen."""

    __slots__ = ("name", "vocabulary_axis", "optional", "aliases", "force_dtype", "tied_names")
    _FIELDS = __slots__

    def __init__(self, name, vocabulary_axis=None, optional=False, aliases=None, force_dtype=None,
                 tied_names=None, is_embed=None):
        if is_embed is not None and vocabulary_axis is None:
            vocabulary_axis = 0 if is_embed else None
        for k, v in (("name", name), ("vocabulary_axis", vocabulary_axis), ("optional", bool(optional)),
                     ("aliases", tuple(aliases) if aliases else None), ("force_dtype", force_dtype),
                     ("tied_names", tuple(tied_names) if tied_names else None)):
            object.__setattr__(self, k, v)

    @property
    def is_embed(self):
        return self.vocabulary_axis is not None

    def __setattr__(self, k, v):
        raise ValueError("WeightInfo is frozen")

    def model_dump(self, **_):
        return {k: getattr(self, k) for k in self._FIELDS}

    def _key(self):
        return tuple(getattr(self, k) for k in self._FIELDS)

    def __eq__(self, other):
        return isinstance(other, WeightInfo) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return "WeightInfo(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self._FIELDS)

    @classmethod
    def _from(cls, d, prefix):
        def cut(s):
            return s[len(prefix):] if prefix and s.startswith(prefix) else s
        return cls(cut(d["name"]), vocabulary_axis=0 if d["is_embed"] else None, optional=d["optional"],
                   aliases=[cut(a) for a in d["aliases"] or ()] or None, force_dtype=d["force_dtype"],
                   tied_names=[cut(a) for a in d["tied_names"] or ()] or None)


def _prefixed(w, prefix):
    if not prefix:
        return w
    return WeightInfo(prefix + w.name, vocabulary_axis=w.vocabulary_axis, optional=w.optional,
                      aliases=[prefix + a for a in w.aliases or ()] or None, force_dtype=w.force_dtype,
                      tied_names=[prefix + a for a in w.tied_names or ()] or None)


def _config_json(config):
    """A model config as config.json text: None, a dict, JSON text, or an
    object with to_dict() (transformers' PretrainedConfig) or attributes."""
    if config is None:
        return None
    if isinstance(config, str):
        return config
    if isinstance(config, dict):
        return json.dumps(config)
    if hasattr(config, "to_dict"):
        return json.dumps(config.to_dict(), default=str)
    return json.dumps({k: v for k, v in vars(config).items() if not k.startswith("_")}, default=str)


class _Source:
    """The configuration an architecture was planned from, and its
    descriptions per model config (each a plan of it, kept)."""

    def __init__(self, text, label, allow_crimes):
        self.text, self.label, self.allow_crimes = text, label, allow_crimes
        self._cache = {}

    def describe(self, config):
        key = _config_json(config)
        if key not in self._cache:
            self._cache[key] = arch_json(self.text, self.label, key, self.allow_crimes)
        return self._cache[key]


class ModuleArchitecture:
    """One module's weights (mergekit's ModuleArchitecture), without the
    module's weight prefix."""

    def __init__(self, source, index, desc):
        self._source, self._index = source, index
        self._name = desc["name"]
        self._prefix = desc["weight_prefix"]
        self._key = desc["num_layers_config_key"]
        self._model_type = None

    def _m(self, config):
        return self._source.describe(config)["modules"][self._index]

    def name(self):
        return self._model_type or self._name

    def num_layers_config_key(self):
        return self._key or "num_hidden_layers"

    def num_layers(self, config=None):
        return self._m(config)["num_layers"]

    def pre_weights(self, config=None):
        return [WeightInfo._from(w, self._prefix) for w in self._m(config)["pre"]]

    def layer_weights(self, index, config=None):
        layers = self._m(config)["layers"]
        if not 0 <= index < len(layers):
            raise IndexError("layer %d of %d" % (index, len(layers)))
        return [WeightInfo._from(w, self._prefix) for w in layers[index]]

    def post_weights(self, config=None):
        return [WeightInfo._from(w, self._prefix) for w in self._m(config)["post"]]

    def all_weights(self, config=None):
        m = self._m(config)
        out = [WeightInfo._from(w, self._prefix) for w in m["pre"]]
        for layer in m["layers"]:
            out.extend(WeightInfo._from(w, self._prefix) for w in layer)
        out.extend(WeightInfo._from(w, self._prefix) for w in m["post"])
        return out


class ModuleDefinition:
    def __init__(self, architecture, weight_prefix=None, subfolder=None):
        self.architecture = architecture
        self.weight_prefix = weight_prefix
        self.subfolder = subfolder

    def __repr__(self):
        return "ModuleDefinition(weight_prefix=%r, subfolder=%r)" % (self.weight_prefix, self.subfolder)


class ModelArchitecture:
    """A model's architecture (mergekit's ModelArchitecture): modules (a
    dict of ModuleDefinition by name, in order), architectures (class
    names), expected_model_type, tagalong_files, vocab_size_config_key.
    inferred: mk built it from the tensor names (no definition knew the
    class).  file: libmk's definition's name ("llama")."""

    def __init__(self, source, desc):
        self._source = source
        self.architectures = list(desc["architectures"] or [])
        self.expected_model_type = desc["model_type"] or ""
        self.model_type = self.expected_model_type
        self.tagalong_files = list(desc["tagalong_files"]) if desc["tagalong_files"] else None
        self.vocab_size_config_key = desc["vocab_size_config_key"]
        self.inferred = bool(desc["inferred"])
        self.file = desc["file"]
        self.modules = {}
        for i, m in enumerate(desc["modules"]):
            arch = ModuleArchitecture(source, i, m)
            arch._model_type = self.expected_model_type if len(desc["modules"]) == 1 else None
            self.modules[m["name"]] = ModuleDefinition(arch, m["weight_prefix"], m["subfolder"])

    def all_weights(self, config=None):
        """Every weight of a model with this config (None: the base
        model's), in mergekit's order: per module its pre weights, each
        layer's, its post weights; names with the module's prefix."""
        out = []
        for md in self.modules.values():
            out.extend(_prefixed(w, md.weight_prefix) for w in md.architecture.all_weights(config))
        return out

    def num_layers(self, config=None):
        """The default module's layer count (else the first module's)."""
        md = self.modules.get("default") or next(iter(self.modules.values()))
        return md.architecture.num_layers(config)

    def __repr__(self):
        return "ModelArchitecture(architectures=%r, model_type=%r, modules=%r)" % (
            self.architectures, self.expected_model_type, list(self.modules))


class ConfiguredModuleArchitecture:
    def __init__(self, info, config, weight_prefix=None):
        self.info, self.config, self.weight_prefix = info, config, weight_prefix

    def num_layers(self):
        return self.info.num_layers(self.config)

    def pre_weights(self):
        return [_prefixed(w, self.weight_prefix) for w in self.info.pre_weights(self.config)]

    def post_weights(self):
        return [_prefixed(w, self.weight_prefix) for w in self.info.post_weights(self.config)]

    def layer_weights(self, index):
        return [_prefixed(w, self.weight_prefix) for w in self.info.layer_weights(index, self.config)]

    def all_weights(self):
        return [_prefixed(w, self.weight_prefix) for w in self.info.all_weights(self.config)]


class ConfiguredModelArchitecture:
    def __init__(self, info, config):
        self.info, self.config = info, config

    def all_weights(self):
        return self.info.all_weights(self.config)

    def get_module(self, module_name):
        md = self.info.modules[module_name]
        return ConfiguredModuleArchitecture(md.architecture, self.config, md.weight_prefix)


def _config_text(config):
    """(text, label) of a merge configuration: a MergeConfiguration, a
    dict or YAML text."""
    if isinstance(config, dict):
        return json.dumps(config, indent=1), "config"
    if isinstance(config, str):
        return config, "config.yml"
    if not hasattr(config, "_source"):
        raise TypeError("expected a MergeConfiguration, a dict or YAML text, not %s" % type(config).__name__)
    return config._source()


def get_architecture_info(config, options=None):
    """The architecture of the output of the merge configuration (a
    MergeConfiguration, a dict or YAML text), as mk-yaml plans it: the
    models' architectures must agree unless options.allow_crimes.
    Raises ConfigError when the configuration cannot be planned."""
    opts = options or MergeOptions()
    text, label = _config_text(config)
    src = _Source(text, label, bool(getattr(opts, "allow_crimes", False)))
    return ModelArchitecture(src, src.describe(None))
