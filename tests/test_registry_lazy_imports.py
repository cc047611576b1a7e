"""Heavy optional packages are imported where a class is built, not with its module: reading a registered class's
`Config` (what `embodied train` does for every env, policy and algo) stays cheap, and building it without its
extra still gives the one-line MissingExtraError naming the extra and the package."""

import subprocess
import sys
import textwrap

import pytest

from embodied import registry
from embodied.registry import MissingExtraError

HEAVY = ("textarena", "reasoning_gym", "transformers", "peft", "nltk")


def block(monkeypatch, package: str) -> None:
    """Make `import package` (and its submodules) fail as where it is not installed, whether or not it is."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)


def test_reading_every_config_imports_no_heavy_package():
    # a fresh interpreter: this one may have imported them for other tests
    code = textwrap.dedent(f"""
        import sys
        from embodied import registry
        for kind in ("env", "policy", "algo"):
            for name in registry.names(kind):
                try:
                    registry.resolve(kind, name).Config()
                except registry.MissingExtraError:
                    pass
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("env, package", [("lm_guess_number", "textarena"), ("lm_calculator", "reasoning_gym")])
def test_a_text_env_without_its_package_names_the_extra(monkeypatch, env, package):
    registry.resolve("env", env)  # the module imports without it
    block(monkeypatch, package)
    with pytest.raises(MissingExtraError, match=rf"env '{env}' needs the optional package '{package}.*"
                                                r"pip install -e '\.\[text\]'"):
        registry.build("env", env, {})


def test_the_lm_policy_without_transformers_names_the_extra(monkeypatch):
    registry.resolve("policy", "lm")
    block(monkeypatch, "transformers")
    with pytest.raises(MissingExtraError, match=r"policy 'lm' needs the optional package 'transformers': "
                                                r"pip install -e '\.\[lm\]'"):
        registry.build("policy", "lm", {"model": "tiny"})


def test_the_vla_policy_without_transformers_names_the_extra(monkeypatch):
    env = registry.build("env", "arm_reach", {}, num_envs=1, device="cpu")
    registry.resolve("policy", "vla")
    block(monkeypatch, "transformers")
    with pytest.raises(MissingExtraError, match=r"policy 'vla' needs the optional package 'transformers': "
                                                r"pip install -e '\.\[transformers\]'"):
        registry.build("policy", "vla", {}, observation_spec=env.observation_spec, action_spec=env.action_spec)


def test_the_loaders_say_which_extra_without_the_registry(monkeypatch):
    from policies.lm import load
    from policies.vla import backbone

    block(monkeypatch, "transformers")
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[lm\]'"):
        load.load_lm("tiny")
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[transformers\]'"):
        backbone.build_backbone(None, 300)


def test_build_translates_a_missing_package_only(tmp_path, monkeypatch):
    (tmp_path / "lazy_envs.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass

        class _Env:
            @dataclass
            class Config:
                pass

        class NeedsPackage(_Env):
            def __init__(self, config):
                import not_an_installed_package_xyz  # noqa: F401

        class BrokenCheckout(_Env):
            def __init__(self, config):
                import embodied.no_such_module_xyz  # noqa: F401
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtraError, match="'lazy_envs:NeedsPackage' needs the optional package "
                                                "'not_an_installed_package_xyz': pip install not_an_installed"):
        registry.build("env", "lazy_envs:NeedsPackage", {})
    with pytest.raises(ModuleNotFoundError) as raised:  # our own module missing: the raw error, not an extra
        registry.build("env", "lazy_envs:BrokenCheckout", {})
    assert not isinstance(raised.value, MissingExtraError)
