"""A downstream wrapper written against mergekit's Python API, in the
style of TRL's merge callback and the sentence-transformers merge helper:
a configuration from YAML text or from a dict, validated, merged with
run_merge and the options such wrappers pass.  test/python/test_wrapper.py
loads it with its import root changed from mergekit to mk."""
import yaml

from mergekit.config import MergeConfiguration
from mergekit.merge import MergeOptions, run_merge


def merge_from_dict(config, out_dir):
    merge_config = MergeConfiguration.model_validate(config)
    run_merge(merge_config, out_dir,
              options=MergeOptions(cuda=False, trust_remote_code=False, copy_tokenizer=True,
                                   lazy_unpickle=False, low_cpu_memory=True))


def merge_from_yaml(text, out_dir):
    merge_config = MergeConfiguration.model_validate(yaml.safe_load(text))
    run_merge(merge_config, out_dir,
              options=MergeOptions(cuda=False, trust_remote_code=False, copy_tokenizer=True,
                                   lazy_unpickle=False, low_cpu_memory=True))
