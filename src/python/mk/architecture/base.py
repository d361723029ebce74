"""mergekit.architecture.base's names (defined in mk.architecture)."""
from . import (ConfiguredModelArchitecture, ConfiguredModuleArchitecture, ModelArchitecture, ModuleArchitecture,
               ModuleDefinition, WeightInfo)

__all__ = ["WeightInfo", "ModuleArchitecture", "ModuleDefinition", "ModelArchitecture",
           "ConfiguredModuleArchitecture", "ConfiguredModelArchitecture"]
