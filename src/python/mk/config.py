"""Merge configurations (mergekit.config's names)."""
import ctypes
import json
import logging

from ._lib import _Diags, _Err, _RunOpts, _diag_lines, _load
from .errors import ConfigError

log = logging.getLogger("mk")


class MergeConfiguration:
    """A merge configuration, validated by mk's planner (the models are
    opened, architectures and parameters checked) when it is made."""

    def __init__(self, text, label="config"):
        self._text = text
        self._label = label
        self.warnings = []

    @classmethod
    def model_validate(cls, obj):
        """From a dict as mergekit's YAML would load (or another
        MergeConfiguration).  Raises ConfigError with every diagnostic."""
        if isinstance(obj, MergeConfiguration):
            return obj
        if not isinstance(obj, dict):
            raise TypeError("MergeConfiguration.model_validate: expected a dict, not %s" % type(obj).__name__)
        # JSON is YAML: the planner reads it as the file would be read
        self = cls(json.dumps(obj, indent=1), "config")
        self._validate()
        return self

    @classmethod
    def from_yaml(cls, text, label="config.yml"):
        """From YAML text."""
        self = cls(text, label)
        self._validate()
        return self

    def to_yaml(self):
        return self._text

    def _validate(self):
        lines = validate(self)
        self.warnings = [x for x in lines if x.startswith("warning: ")]
        for w in self.warnings:
            log.warning("%s", w[len("warning: "):])


def validate(config):
    """Every diagnostic of a configuration (a MergeConfiguration, a dict or
    YAML text) as lines; raises ConfigError when there are errors."""
    if isinstance(config, dict):
        config = MergeConfiguration(json.dumps(config, indent=1))
    elif isinstance(config, str):
        config = MergeConfiguration(config, "config.yml")
    lib = _load()
    raw = config._text.encode()
    o = _RunOpts(text=raw, len=len(raw), label=config._label.encode())
    d, e = _Diags(), _Err()
    rc = lib.mk_validate_config(ctypes.byref(o), ctypes.byref(d), ctypes.byref(e))
    lines = _diag_lines(lib, d)
    lib.mk_diags_free(ctypes.byref(d))
    if rc:
        errs = [x for x in lines if x.startswith("error: ")]
        raise ConfigError("\n".join(errs) if errs else e.msg.decode("utf-8", "replace"), lines)
    return lines
