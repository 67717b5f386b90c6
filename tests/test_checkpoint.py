"""Loading weights: wrappers, prefixes, safety, inference of the architecture, readable mismatches."""

from __future__ import annotations

import json
import pickle
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from conftest import GOLDEN, damage_pickle, golden_config, needs_golden
from safetensors.torch import save_file

from sst_cli import ModelSpec, load_model
from sst_cli.archs.sst import SST, SSTConfig
from sst_cli.archs.sst.infer import infer
from sst_cli.checkpoint import check_fit, read_weights
from sst_cli.errors import CheckpointError, ConfigError, ScaleMismatch, WeightsNotFound

pytestmark = needs_golden


@pytest.fixture(scope="module")
def light_state() -> dict[str, torch.Tensor]:
    return torch.load(GOLDEN / "light_x2.pth", weights_only=True)["params_ema"]


def _save(path: Path, obj: object) -> Path:
    torch.save(obj, path)
    return path


def _same(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_wrappers_and_prefix(tmp_path: Path, light_state: dict) -> None:
    other = {k: torch.zeros_like(v) for k, v in light_state.items()}
    prefixed = OrderedDict((f"module.{k}", v) for k, v in light_state.items())
    cases = {
        "ema.pth": {"params_ema": light_state},
        "params.pth": {"params": light_state},
        "both.pth": {"params": other, "params_ema": light_state},  # the EMA weights win, as upstream
        "state_dict.pth": {"state_dict": light_state, "epoch": 3},
        "bare.pth": light_state,
        "module.pt": {"params": prefixed},
    }
    for name, obj in cases.items():
        model = load_model(_save(tmp_path / name, obj), variant="sst-light")
        assert _same(model, light_state), name
        assert not model.training


def test_tensors_under_a_key_or_prefix_sst_cli_does_not_take_off_are_told_so(tmp_path: Path, light_state: dict) -> None:
    """{"model": tensors} said "entries that are not tensors: model"; keys prefixed net_g. or model. were "not a
    checkpoint of an architecture sst-cli knows" (installing spandrel may help), not a word of the prefix."""
    with pytest.raises(CheckpointError) as info:
        load_model(_save(tmp_path / "nested.pth", {"model": light_state, "epoch": 3}), variant="sst-light")
    assert str(info.value) == (
        f"{tmp_path}/nested.pth: the tensors are nested under 'model', a key sst-cli does not unwrap (it unwraps "
        "params_ema, params, state_dict): save them under one of those, or bare"
    )
    for prefix in ("net_g.", "model."):
        path = _save(tmp_path / "prefixed.pth", {"params": {prefix + k: v for k, v in light_state.items()}})
        for variant in ("sst-light", None):
            with pytest.raises(CheckpointError) as info:
                load_model(path, variant=variant)
            assert str(info.value) == (
                f"{path}: every key starts with '{prefix}', and without it the keys are a SST checkpoint's; save the "
                "tensors without that prefix (sst-cli strips only 'module.')"
            )


def test_safetensors_with_stored_config_needs_no_variant(tmp_path: Path, light_state: dict) -> None:
    path = tmp_path / "w.safetensors"
    save_file(light_state, str(path), metadata={"sst_config": json.dumps(golden_config("light_x2"))})
    _, metadata = read_weights(path)
    assert SSTConfig.from_kwargs(json.loads(metadata["sst_config"])) == SSTConfig.from_kwargs(golden_config("light_x2"))
    assert _same(load_model(path), light_state)
    assert _same(load_model(path, variant="sst-light"), light_state)  # --model that agrees with the file
    with pytest.raises(
        ConfigError, match=r"records the architecture .* sst-light\+ differs \(window_sizes: .*: drop variant$"
    ):
        load_model(path, variant="sst-light+")  # same tensors, other windows: other pixels, never silently
    with pytest.raises(ScaleMismatch, match=r"holds x2 weights but x3 was requested; use scale=2 or weights for x3$"):
        load_model(path, variant="sst-light", scale=3)  # the model is right: "drop variant" would not help


@pytest.mark.parametrize(
    ("cli", "drop", "use"), [(False, "drop model", "use scale=2"), (True, "drop --model", "use --scale 2")]
)
def test_a_model_specs_advice_names_its_options_as_its_caller_gave_them(
    tmp_path: Path, light_state: dict, cli: bool, drop: str, use: str
) -> None:
    """``ModelSpec(model=..., scale=...)`` was told to drop --model and use --scale 2; the command line's specs
    (``cli=True``) still are."""
    path = tmp_path / "w.safetensors"
    save_file(light_state, str(path), metadata={"sst_config": json.dumps(golden_config("light_x2"))})
    with pytest.raises(ConfigError, match=rf"sst-light\+ differs \(window_sizes: .*\): {drop}$"):
        ModelSpec(model="sst-light+", weights=path, cli=cli).load("sst-light", 2, device="cpu", dtype=torch.float32)
    with pytest.raises(ScaleMismatch, match=rf"was requested; {use} or weights for x3$"):
        ModelSpec(model="sst-light", scale=3, weights=path, cli=cli).load(
            "sst-light", 2, device="cpu", dtype=torch.float32
        )


@pytest.mark.parametrize(("text", "said"), [("[1, 2]", "an array"), ("null", "null"), ("7", "a number")])
def test_stored_config_that_is_not_an_object_is_named(tmp_path: Path, light_state: dict, text: str, said: str) -> None:
    """It met Python's own words ("sequence item 0: expected str instance, int found")."""
    path = tmp_path / "w.safetensors"
    save_file(light_state, str(path), metadata={"sst_config": text})
    with pytest.raises(CheckpointError, match=rf"w\.safetensors: invalid sst_config metadata: {said}, not an object"):
        load_model(path)


def test_stored_config_that_contradicts_the_tensors_scale_is_an_inconsistent_file(
    tmp_path: Path, light_state: dict
) -> None:
    """x2 tensors stored with an x4 config were checked as if x4 had been asked for: no --scale said to use
    --scale 2, and --scale 2 said the weights need --scale 4."""
    path = tmp_path / "w.safetensors"
    save_file(
        light_state, str(path), metadata={"sst_config": json.dumps(golden_config("light_x2") | {"upscaling_factor": 4})}
    )
    for scale, variant in ((None, None), (2, None), (4, None), (2, "sst-light"), (None, "sst-light")):
        with pytest.raises(CheckpointError) as info:
            load_model(path, scale, variant=variant)
        assert str(info.value) == (
            f"{path}: its sst_config metadata says x4 but its tensors are x2 weights (an inconsistent file)"
        )
        assert not isinstance(info.value, ScaleMismatch)  # exit 1: no scale the user picks makes it right


def test_a_config_without_a_scale_takes_the_weights_own(tmp_path: Path, light_state: dict) -> None:
    """Such a config (``sst train --config`` accepts it) asked for x4 of x2 weights, and --scale 2 was refused."""
    config = {k: v for k, v in golden_config("light_x2").items() if k != "upscaling_factor"}
    weights = _save(tmp_path / "w.pth", {"params_ema": light_state})
    assert load_model(weights, config=config).scale == 2
    assert load_model(weights, config=config, scale=2).scale == 2
    with pytest.raises(CheckpointError, match=r"holds x2 weights but x3 was requested; use scale=2 or weights for x3$"):
        load_model(weights, config=config, scale=3)  # the architecture's own check: the loader words the advice


def test_window_sizes_are_never_guessed(light_state: dict, tmp_path: Path) -> None:
    """The advice names the keywords of the caller's entry (it said --model and --config to all)."""
    with pytest.raises(ConfigError, match=r"window sizes cannot be read.*name the architecture with variant \(it "
                       r"fits sst-light or sst-light\+\) or pass config with the constructor keywords$"):  # fmt: skip
        load_model(GOLDEN / "light_x2.pth")
    with pytest.raises(ConfigError, match=r"name the architecture with model \(it fits .*\) or pass config with"):
        ModelSpec(weights=GOLDEN / "light_x2.pth").load("sst-light", 2, device="cpu", dtype=torch.float32)


def test_an_upsampler_no_zoo_variant_has_is_explained_not_a_key_error() -> None:
    """mini_x3 has a `pixelshuffle` head with an intermediate width; the x3 zoo variants have direct heads."""
    with pytest.raises(ConfigError, match=r"window sizes cannot be read.*pass config with"):
        load_model(GOLDEN / "mini_x3.pth")
    with pytest.raises(CheckpointError, match=r"intermediate_dim: file has .*, the model has none"):
        load_model(GOLDEN / "mini_x3.pth", 3, variant="sst-light")


def test_wrong_scale_names_both(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="x2 weights but x4 was requested"):
        load_model(GOLDEN / "light_x2.pth", 4, variant="sst-light")
    with pytest.raises(ConfigError, match=r"weights are for x3 but x2 was requested; they need scale=3$"):
        load_model(GOLDEN / "mini_x3.pth", 2, config=golden_config("mini_x3"))


def test_a_file_of_no_known_architecture_names_the_keywords_spandrel_needs_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With spandrel installed, load_model(variant=...) was told "without --model and --config"."""
    from sst_cli.spandrel import foreign

    monkeypatch.setattr(foreign, "available", lambda: True)
    path = _save(tmp_path / "other.pth", {"body.weight": torch.zeros(4, 3, 3, 3)})
    with pytest.raises(CheckpointError, match=r"; without variant and config, spandrel may run it$"):
        load_model(path, variant="sst-light")


def test_wrong_variant_is_explained_field_by_field() -> None:
    with pytest.raises(CheckpointError, match="dim: file has 48, model needs 192"):
        load_model(GOLDEN / "light_x2.pth", variant="sst-l")


def test_infers_everything_the_tensors_determine(light_state: dict) -> None:
    arch, complete = infer(light_state)
    assert not complete  # window sizes are in no tensor
    assert arch == {
        "dim": 48, "n_blocks": 5, "layers_per_block": 6, "num_heads": [3] * 6, "ranks": [16, 16, 16, 24, 24, 24],
        "rib_hidden_dim": 32, "rib_n_freqs": 10, "exp_ratio": 1.5,
        "upsampler_type": "pixelshuffle_direct", "upscaling_factor": 2,
    }  # fmt: skip
    mini, _ = infer(torch.load(GOLDEN / "mini_x3.pth", weights_only=True)["params_ema"])
    assert mini["upsampler_type"] == "pixelshuffle" and mini["intermediate_dim"] == 32
    assert mini["upscaling_factor"] == 3 and mini["exp_ratio"] == 1.25 and mini["ranks"] == [6, 6, 6, 10, 10, 10]


class _Exploit:
    def __reduce__(self) -> tuple:
        return (print, ("this ran code",))


def test_malicious_pickle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.pth"
    with path.open("wb") as fh:
        pickle.dump({"params_ema": _Exploit()}, fh, protocol=2)
    with pytest.raises(CheckpointError, match=r"refused.*could run code"):
        load_model(path, variant="sst-light")
    torch.save({"params_ema": _Exploit()}, path)  # the zip format torch.save writes
    with pytest.raises(CheckpointError, match=r"refused.*could run code"):
        load_model(path, variant="sst-light")


def test_a_changed_byte_is_damage_not_a_threat(tmp_path: Path) -> None:
    """One flipped byte in data.pkl was refused as a file whose loading could run code."""
    path = tmp_path / "flip.pth"
    torch.save({"params_ema": {"w": torch.ones(4)}}, path)
    part = damage_pickle(path)
    with pytest.raises(CheckpointError, match=f"a damaged PyTorch checkpoint: its part {part} fails its checksum"):
        load_model(path, variant="sst-light")


def test_truncated_empty_missing_and_unrelated(tmp_path: Path, light_state: dict) -> None:
    whole = (GOLDEN / "light_x2.pth").read_bytes()
    (tmp_path / "cut.pth").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "cut.safetensors").write_bytes((GOLDEN / "light_x2.safetensors").read_bytes()[:5000])
    (tmp_path / "empty.pth").write_bytes(b"")
    for name, message in [("cut.pth", "truncated or corrupt"), ("cut.safetensors", "truncated or corrupt"),
                          ("empty.pth", "empty")]:  # fmt: skip
        with pytest.raises(CheckpointError, match=message):
            load_model(tmp_path / name, variant="sst-light")
    with pytest.raises(CheckpointError) as info:  # torch's own words stop after their first sentence
        load_model(tmp_path / "cut.pth", variant="sst-light")
    assert str(info.value).endswith("PytorchStreamReader failed reading zip archive: failed finding central directory")
    with pytest.raises(WeightsNotFound, match="not found"):
        load_model(tmp_path / "nope.pth", variant="sst-light")
    resnet = {"conv1.weight": torch.zeros(64, 3, 7, 7), "fc.weight": torch.zeros(10, 512)}
    with pytest.raises(CheckpointError, match=r"not a checkpoint of an architecture sst-cli knows.*conv1\.weight"):
        load_model(_save(tmp_path / "resnet.pth", resnet), variant="sst-light")


def test_files_that_are_not_checkpoints_say_what_they_are(tmp_path: Path) -> None:
    """The unpickler misreads anything but a zip or a pickle (a text file raised KeyError: 105)."""
    (tmp_path / "notes.pth").write_text("hi\nthere\n")
    (tmp_path / "photo.pth").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(32))
    (tmp_path / "folder.pth").mkdir()
    for name, message in [("notes.pth", "not a PyTorch checkpoint: the file is text"),
                          ("photo.pth", "the file is a PNG image"),
                          ("folder.pth", "a folder, not a weights file")]:  # fmt: skip
        with pytest.raises(CheckpointError, match=message):
            load_model(tmp_path / name, variant="sst-light")
    (tmp_path / "dangling.pth").symlink_to(tmp_path / "moved.pth")
    with pytest.raises(WeightsNotFound, match=r"dangling\.pth: a link to .*moved\.pth, which does not exist"):
        load_model(tmp_path / "dangling.pth", variant="sst-light")


def test_a_checkpoint_loads_by_its_content_whatever_its_extension(tmp_path: Path) -> None:
    """A safetensors file named .pth (and the reverse) was refused with "name it ...": the content decides."""
    (tmp_path / "renamed.pth").write_bytes((GOLDEN / "light_x2.safetensors").read_bytes())
    (tmp_path / "renamed.safetensors").write_bytes((GOLDEN / "light_x2.pth").read_bytes())
    expected = read_weights(GOLDEN / "light_x2.safetensors")[0]
    for name in ("renamed.pth", "renamed.safetensors"):
        state = read_weights(tmp_path / name)[0]
        assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in expected)
    legacy = tmp_path / "legacy.pth"  # the pre-1.6 format is a bare pickle: still read
    torch.save({"a": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    assert torch.equal(read_weights(legacy)[0]["a"], torch.ones(2))


def test_misnamed_foreign_unreadable_and_broken_files_are_one_sentence(
    tmp_path: Path, light_state: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zipfile

    (tmp_path / "photo.safetensors").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(32))
    with zipfile.ZipFile(tmp_path / "archive.pth", "w") as archive:
        archive.writestr("hello.txt", "hi")
    (tmp_path / "loop.pth").symlink_to(tmp_path / "loop.pth")
    nan = {k: v * float("nan") if v.is_floating_point() else v for k, v in light_state.items()}
    for name, message in [
        ("photo.safetensors", "not a safetensors file: the file is a PNG image"),
        ("archive.pth", "not a PyTorch checkpoint: the file is a zip archive of other files"),
        ("loop.pth", "loop.pth: cannot read it: too many levels of symbolic links"),
        ("x" * 300 + ".pth", "cannot read it: file name too long"),
        (_save(tmp_path / "nan.pth", nan).name, r"nan.pth: the weights hold NaN or Inf values \(\S+ and \d+ more\)"),
    ]:
        with pytest.raises(CheckpointError, match=message):
            read_weights(tmp_path / name)
    locked = _save(tmp_path / "locked.pth", light_state)
    real_open = Path.open

    def refuse(self: Path, *args: object, **kwargs: object) -> object:  # chmod 000 does not bind root
        if self.name == "locked.pth":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(CheckpointError, match=r"locked\.pth: cannot read it: permission denied"):
        read_weights(locked)


def test_without_a_model_the_file_is_told_which_variants_fit_every_tensor(tmp_path: Path, light_state: dict) -> None:
    with pytest.raises(ConfigError, match=r"window sizes cannot be read .* \(it fits sst-light or sst-light\+\)"):
        load_model(_save(tmp_path / "light.pth", light_state))
    broken = dict(light_state, **{"body.0.0.attn.gate.0.bias": torch.zeros(7, 7)})  # hyper-parameters still fit
    with pytest.raises(CheckpointError, match=r"wrong shape .*body\.0\.0\.attn\.gate\.0\.bias \(7, 7\) vs "
                       r"\(48,\) \(its sizes are sst-light's, but not every tensor fits\)"):  # fmt: skip
        load_model(_save(tmp_path / "broken.pth", broken))


def test_mismatch_report_lists_missing_unexpected_and_shapes(tmp_path: Path, light_state: dict) -> None:
    state = dict(light_state)
    del state["body.4.5.ffn.agg.bias"]
    state["body.9.extra"] = torch.zeros(1)
    state["body.5.weight"] = torch.zeros(7)
    with pytest.raises(CheckpointError) as info:
        load_model(_save(tmp_path / "odd.pth", state), variant="sst-light")
    text = str(info.value)
    assert "1 missing: body.4.5.ffn.agg.bias" in text
    assert "1 unexpected: body.9.extra" in text
    assert "body.5.weight (7,) vs (48,)" in text


def test_integer_tensors_are_named_not_sent_to_torch(tmp_path: Path, light_state: dict) -> None:
    """A weight stored as integers (a quantized file) met load_state_dict's 700-line refusal."""
    one = dict(light_state, **{"proj.bias": light_state["proj.bias"].long()})
    with pytest.raises(
        CheckpointError, match=r"one\.pth does not fit the network: 1 not floating point: proj\.bias int64"
    ):
        load_model(_save(tmp_path / "one.pth", one), variant="sst-light")
    quantized = {k: v.to(torch.int8) for k, v in light_state.items()}
    with pytest.raises(
        CheckpointError, match=rf"{len(quantized)} not floating point: .* int8 and {len(quantized) - 5} more$"
    ):
        load_model(_save(tmp_path / "q.pth", quantized), variant="sst-light")


def test_integer_buffers_stored_as_floats_are_cast_back_only_when_exact() -> None:
    """Whole numbers below a float type's exact limit are the integers the file held; above it, or with
    fractions, they may be another number (float16 rounds 2049 to 2048) and are refused."""
    net = torch.nn.Module()
    net.register_buffer("index", torch.zeros(2, dtype=torch.long))
    back = check_fit(net, {"index": torch.tensor([0.0, 2047.0]).half()}, "f.pth")["index"]
    assert back.dtype == torch.long and back.tolist() == [0, 2047]
    for values in (torch.tensor([0.0, 2048.0]).half(), torch.tensor([-256.0, 1.0]).bfloat16(), torch.tensor([0.5, 1])):
        kind = str(values.dtype).removeprefix("torch.")
        with pytest.raises(CheckpointError, match=rf"f\.pth does not fit .*whole numbers exactly: index {kind}$"):
            check_fit(net, {"index": values}, "f.pth")


def test_loads_on_requested_dtype(light_state: dict) -> None:
    model = load_model(GOLDEN / "light_x2.safetensors", variant="sst-light", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert isinstance(model, SST) and not model.training


def test_model_choice_refusals_name_the_options_as_the_caller_gave_them(tmp_path: Path) -> None:
    """``Upscaler(config=...)``, ``ModelSpec(hub_repo=...)`` and ``load_model(hub_repo=...)`` were told of
    ``--config``, ``--weights`` and ``--hub-repo``: the command line's words, which a Python caller never typed.
    A spec the command line made (``cli=True``) keeps them."""
    from sst_cli import Upscaler

    config = GOLDEN / "light_x2.json"
    weights = tmp_path / "w.pth"
    api_and_cli = [
        (
            lambda cli: ModelSpec(config=config, cli=cli),
            "config describes an architecture; give the weights to load into it as weights=",
            "--config describes an architecture; give the weights to load into it with --weights",
        ),
        (
            lambda cli: ModelSpec("sst-light", weights=weights, config=config, cli=cli),
            "config and model both say which architecture to build: give one of them",
            "--config and --model both say which architecture to build: give one of them",
        ),
        (
            lambda cli: ModelSpec(weights=weights, hub_repo="a/b", cli=cli),
            "hub_repo says where zoo weights come from; weights names the file itself: drop one",
            "--hub-repo says where zoo weights come from; --weights names the file itself: drop one",
        ),
        (
            lambda cli: ModelSpec("sst-light", 2, hub_repo="bad", cli=cli),
            "hub_repo='bad' is not a Hugging Face repository: give it as OWNER/NAME",
            "--hub-repo 'bad' is not a Hugging Face repository: give it as OWNER/NAME",
        ),
        (
            lambda cli: load_model("sst-light", 2, hub_repo="bad", cli=cli),  # said before the hub is asked
            "hub_repo='bad' is not a Hugging Face repository: give it as OWNER/NAME",
            "--hub-repo 'bad' is not a Hugging Face repository: give it as OWNER/NAME",
        ),
    ]
    for make, api, command_line in api_and_cli:
        for cli, message in ((False, api), (True, command_line)):
            with pytest.raises(ConfigError) as info:
                make(cli)
            assert str(info.value) == message
    with pytest.raises(ConfigError, match=r"^config describes an architecture; give the weights to load into it as"):
        Upscaler(config=config)
    with pytest.raises(ConfigError, match=r"^hub_repo='bad' is not a Hugging Face repository"):
        Upscaler("sst-light", scale=2, hub_repo="bad")


def test_load_model_refuses_an_unusable_device_before_reading_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_model(..., device="cuda")`` on a PyTorch without CUDA met a bare AssertionError, ``"xyz"`` and
    ``"mps"`` a RuntimeError, each after the weights were read: now the ConfigError ``Upscaler`` gives, first."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    missing = tmp_path / "absent.pth"  # were the file read first, its absence would be said instead
    with pytest.raises(ConfigError, match=r"^unknown device 'xyz'; use "):
        load_model(missing, device="xyz")
    with pytest.raises(ConfigError, match=r"^device 'cuda' was requested but .* no CUDA GPU here; use device='cpu'$"):
        load_model(missing, device="cuda")
    with pytest.raises(ConfigError, match=r"no CUDA GPU here; use --device cpu$"):
        load_model(missing, device="cuda:1", cli=True)
    model = load_model(GOLDEN / "light_x2.safetensors", variant="sst-light", device=torch.device("cpu"))
    assert next(model.parameters()).device.type == "cpu"
    assert next(load_model(GOLDEN / "light_x2.safetensors", variant="sst-light", device="auto").parameters()).is_cpu


def test_contradicting_model_options_are_refused_before_any_file_is_read(tmp_path: Path, light_state: dict) -> None:
    from sst_cli.loader import ModelSpec
    from sst_cli.zoo import get_variant

    weights = _save(tmp_path / "w.pth", light_state)
    with pytest.raises(ConfigError, match=r"^config and model both say which architecture"):
        ModelSpec("sst-light", weights=weights, config={"dim": 48})
    with pytest.raises(ConfigError, match=r"^hub_repo says where zoo weights come from; weights names the file"):
        ModelSpec(weights=weights, hub_repo="someone/mirror")
    with pytest.raises(ConfigError, match=r"config .*absent\.json does not exist"):
        ModelSpec(weights=tmp_path / "absent.pth", config=tmp_path / "absent.json")  # the config is said first
    (tmp_path / "odd.json").write_text(json.dumps({"dim": 48, "bogus": 1}))
    with pytest.raises(ConfigError, match=r"config .*odd\.json: unknown SST config key\(s\): bogus"):
        load_model(weights, config=tmp_path / "odd.json")
    with pytest.raises(ConfigError, match=r"unknown model 'sst-lite'; did you mean sst-light\?"):
        get_variant("sst-lite")


def test_a_config_that_is_not_json_text_is_one_sentence(tmp_path: Path, light_state: dict) -> None:
    """Binary, Latin-1, a weights file given by mistake, absurd nesting and endless devices each met a
    traceback (or, for /dev/zero, memory running out); a BOM is what Windows editors write, and is fine."""
    from sst_cli.loader import read_config_kwargs

    weights = _save(tmp_path / "w.pth", light_state)
    cases = {
        "binary.json": (b"\xff\xfe\x00", r"binary\.json is not UTF-8 text \(byte 0\)"),
        "latin1.json": ('{"attn_type": "RIB\u00e9"}'.encode("latin-1"), "latin1.json is not UTF-8 text"),
        "deep.json": (b"[" * 100_000 + b"]" * 100_000, "deep.json is not valid JSON: nested too deep"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ConfigError, match=message):
            read_config_kwargs(tmp_path / name)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20) + b"{}")
    with pytest.raises(ConfigError, match=r"big\.json is 2,097,154 bytes: not a config of keywords"):
        read_config_kwargs(big)
    with pytest.raises(ConfigError, match=r"w\.pth is [\d,]+ bytes: not a config of keywords \(weights\?\)"):
        read_config_kwargs(weights)
    with pytest.raises(ConfigError, match="is not a file"):
        read_config_kwargs(tmp_path)
    if Path("/dev/zero").exists():
        with pytest.raises(ConfigError, match="/dev/zero is not a file"):
            read_config_kwargs("/dev/zero")
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"dim": 48}).encode())
    assert read_config_kwargs(tmp_path / "bom.json") == {"dim": 48}


def test_a_damaged_sst_file_is_not_sent_to_spandrel(tmp_path: Path, light_state: dict) -> None:
    """An SST file missing a tensor was told that installing spandrel may help: it would not."""
    near = {k: v for k, v in light_state.items() if k != "proj.weight"}
    for variant in ("sst-light", None):
        with pytest.raises(CheckpointError, match=r"looks like a SST checkpoint but lacks proj\.weight") as info:
            load_model(_save(tmp_path / "near.pth", near), variant=variant)
        assert "spandrel" not in str(info.value)


@pytest.mark.parametrize(
    ("key", "tensor", "said"),
    [
        (
            "body.0.0.attn.to_q",
            torch.zeros(3, 16),
            r"body\.0\.0\.attn\.to_q has the shape \(3, 16\): 2-D, where SST's is 3-D",
        ),
        ("proj.weight", torch.zeros(()), r"proj\.weight has the shape \(\): 0-D, where SST's is 4-D"),
        ("body.0.0.attn.to_hidden", torch.zeros(5), r"body\.0\.0\.attn\.to_hidden has the shape \(5,\): 1-D"),
    ],
)
def test_a_tensor_of_another_number_of_dimensions_is_named(
    tmp_path: Path, light_state: dict, key: str, tensor: torch.Tensor, said: str
) -> None:
    """Inference read sizes from shapes by index: a raw ``IndexError: tuple index out of range`` traceback."""
    from typer.testing import CliRunner

    from sst_cli.cli import app

    path = _save(tmp_path / "odd.pth", {"params_ema": dict(light_state, **{key: tensor})})
    for variant in ("sst-light", None):
        with pytest.raises(CheckpointError, match=rf"^{tmp_path}/odd\.pth: {said}"):
            load_model(path, variant=variant)
    result = CliRunner().invoke(app, ["models", "info", str(path)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().replace("\n", " ").count("odd.pth: ") == 1, result.output


def test_what_the_tensors_say_is_refused_naming_the_file(tmp_path: Path, light_state: dict) -> None:
    """These said neither the file nor, for some, the problem: "not an SST checkpoint" (it is one, incomplete),
    "2 channels per colour" (7 channels, floor-divided), "sst-light exists at x2 / x3 / x4, not x0" (an empty
    upsampler)."""
    ffn, up = "body.0.0.ffn.proj.weight", "upsampler.up_conv.weight"
    both = ("sst-light", None)
    for name, state, variants, said in [
        ("gone", {k: v for k, v in light_state.items() if k != ffn}, both,
         f": an incomplete SST checkpoint: key '{ffn}' is missing"),
        ("seven", light_state | {up: torch.zeros(7, 48, 3, 3)}, both,
         f": {up} has 7 output channels: not 3 colours times a square scale factor"),
        ("empty", light_state | {up: torch.zeros(0, 48, 3, 3)}, both, f": {up} is empty (0, 48, 3, 3)"),
        ("five", light_state | {up: torch.zeros(75, 48, 3, 3)}, ("sst-light",),
         " holds x5 weights, and sst-light exists at x2 / x3 / x4 only"),
    ]:  # fmt: skip
        path = _save(tmp_path / f"{name}.pth", {"params_ema": state})
        for variant in variants:
            with pytest.raises(CheckpointError) as info:
                load_model(path, variant=variant)
            assert str(info.value) == f"{path}{said}"


def test_safetensors_whose_header_length_looks_like_a_pickle_or_a_zip(tmp_path: Path) -> None:
    """A header of 0x..80 bytes starts the file with 0x80 (a pickle's opcode), one of 0x4b50 with b"PK" (a zip):
    such files, named .safetensors or not, were read as what their first byte suggested."""
    from safetensors.torch import save_file

    tensors = {"a": torch.ones(3)}
    save_file(tensors, str(tmp_path / "plain.safetensors"), metadata={"pad": ""})
    plain = int.from_bytes((tmp_path / "plain.safetensors").read_bytes()[:8], "little")
    for first, length in ((b"\x80", 0x180), (b"PK", 0x4B50)):
        path = tmp_path / f"{first.hex()}.pth"
        for pad in range(length - plain - 16, length - plain + 16):  # the header grows with the metadata
            save_file(tensors, str(path), metadata={"pad": "x" * pad})
            if path.read_bytes().startswith(first):
                break
        else:
            pytest.fail(f"no header length starting with {first!r}")
        assert torch.equal(read_weights(path)[0]["a"], tensors["a"])
        renamed = path.rename(path.with_suffix(".safetensors"))
        assert torch.equal(read_weights(renamed)[0]["a"], tensors["a"])


@pytest.mark.parametrize(
    ("metadata", "scale"),
    [
        ({"sst_config": json.dumps({"upscaling_factor": 3})}, 3),
        ({"dat_config": json.dumps({"upscale": 2, "embed_dim": 60})}, 2),  # any architecture's, by the registry
        ({"sstreal_config": json.dumps({"scale": 4})}, 4),
        ({"sst_config": "{broken"}, None),
        ({"sst_config": json.dumps({"upscaling_factor": True})}, None),
        ({}, None),
    ],
)
def test_the_scale_a_file_declares_is_read_alone(tmp_path: Path, metadata: dict, scale: int | None) -> None:
    from sst_cli.loader import declared_scale

    path = tmp_path / "w.safetensors"
    save_file({"x": torch.zeros(1)}, str(path), metadata=metadata)
    assert declared_scale(path) == scale
