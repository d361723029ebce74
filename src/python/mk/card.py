"""Model cards (mergekit.card's names): generate_card.

The README.md text is libmk's (mk_card_generate(3)), the card mk-yaml
writes for the same configuration and title: no second template here."""
import json

from ._describe import card_text

__all__ = ["generate_card"]


def generate_card(config, config_yaml, name=None):
    """The model card of a merge of config (a MergeConfiguration, a dict
    or YAML text) titled name (None or "": "Untitled Model (1)"), quoting
    config_yaml as its configuration.  Reads no model: a model path is a
    Hub repository when it is not an existing local path and has at most
    one '/' (mergekit asks the Hub where both could be)."""
    if isinstance(config, dict):
        text, label = json.dumps(config, indent=1), "config"
    elif isinstance(config, str):
        text, label = config, "config.yml"
    else:
        text, label = config._source()
    return card_text(text, label, config_yaml if config_yaml is not None else text, name)
