"""The shipped profiles name models the installed Anthropic SDK still serves: the SDK
warns at every request for a model past (or near) its end of life, and a user's first
request through the default profile must not be one of those (issue 21, item 4)."""

import pathlib

import yaml
from anthropic._data import DEPRECATED_MODELS

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


def named_models(profile):
    """Every model a profile asks a backend for: default models and alias targets."""
    config = yaml.safe_load(profile.read_text())
    names = [b["default_model"] for b in config.get("backends", []) if b.get("default_model")]
    names += list((config.get("model_aliases") or {}).values())
    return names


def test_no_profile_names_a_deprecated_anthropic_model():
    profiles = sorted(CONFIGS.glob("glider*.yaml"))
    assert profiles, CONFIGS
    for profile in profiles:
        deprecated = [m for m in named_models(profile) if m in DEPRECATED_MODELS]
        assert not deprecated, f"{profile.name}: {deprecated} (end of life: {[DEPRECATED_MODELS[m] for m in deprecated]})"
