"""Engine profiles (codesign.model.engines): the catalog's profiles, their loader's errors, and an
instance's ``system.engine`` applying the profile's rules to the engine-free physics.

Hand-derived figures:
- vLLM (arg_utils.py at vllm-project/vllm@99d7eb5): 1,024 sequences and 8,192 tokens per step on a
  device of at least 70 GiB that is no A100, else 256 and 2,048. The H100 SXM (80 GiB) is in the
  first class; the A100 SXM (80 GiB, an A100) and the L40S (48 GiB) are in the second.
- SGLang's chunked_prefill_size: 8,192 below 160 GiB (H100, 80 GiB), 16,384 from it on.
- Llama 3.1 8B, 16 sequences at 8000/8, 8,192 tokens per iteration: ceil(16 x 8,008 / 8,192) =
  ceil(15.64) = 16 iterations, 8 beyond the round's 8.
- The decoding state per slot of Llama 3.1 8B (vocabulary 128,256) at TP 1 and 8000 + 8 tokens:
  4 x 128,256 x 4 + 128,256 x 4 + 1,024 x 8 x 8 + 10 x 4 x 8,008 = 2,052,096 + 513,024 + 65,536 +
  320,320 = 2,950,976 B; 16 sequences hold 47,215,616 B. Under vLLM (no such state): 0.
- An FP8 checkpoint's KV cache under vLLM is BF16 (2 B per element) where the physics keeps FP8
  (1 B): twice the bytes.
- No engine charges none of that state: the device's memory (``memory_local_B``) holds 47,215,616 B
  less than under trtllm-0.14, and nothing else in it differs.
- Llama 3.1 70B at TP 8 on the H100 (NVLink 4, switches that reduce), 80 layers of two TP
  all-reduces each and one logits all-gather (a ring, 7 steps) per decode step: the physics'
  all-reduce ("fastest", model.md eq. 3.17c) runs in the switch in 2 steps, 160 x 2 + 7 = 327 steps;
  NCCL's profile (trtllm-0.14's) keeps the ring's 2(8 - 1) = 14 steps, 160 x 14 + 7 = 2,247.
- TensorRT-LLM 1.x's host time, 20 us per sequence of a step (trtllm-1.x.toml): a decode step of 16
  sequences gains 16 x 20 = 320 us, of 64 sequences 1,280 us, and so does the prefill step of the
  same 16 (64) sequences; trtllm-0.14 and no engine: 0. On one device nothing else of a step differs
  between trtllm-1.x and no engine (no collective; the decoding state and the cap are memory and
  batch rules), so the step times differ by exactly that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codesign.catalog import engine_names
from codesign.errors import InputError
from codesign.kinds.grid.spec import Instance, InstanceFile, instance_from_data
from codesign.model import engines
from codesign.model.calibration import load_calibration, shipped_path
from codesign.model.evaluate import evaluate
from codesign.model.hardware import hardware_table
from codesign.model.schedule import schedule_table
from codesign.paths import INSTANCES_ENV, instances_dir

PROFILES = ("sglang", "trtllm-0.14", "trtllm-0.14-fastest-allreduce", "trtllm-1.x", "trtllm-1.x-all-to-all", "vllm")


def _raw(engine: str | None, *, workload: str = "llama-3.1-8b", precision: str = "fp8", isl: int = 8000,
         osl: int = 8, decisions: dict | None = None, chip: str = "h100-sxm", devices: int = 1, **system) -> dict:
    sysd = {"devices": devices, "scale_up_domain": 8, **system}
    if engine is not None:
        sysd["engine"] = engine
    return {"name": "engine-rules", "description": "t", "system": sysd,
            "hardware": {"family": "catalog", "chip": chip},
            "workloads": [{"name": "main", "workload": workload, "precision": precision, "phase": "both",
                           "input_tokens": isl, "output_tokens": osl,
                           "decisions": decisions or {"tp": [1], "pp": [1], "batch": [16]}}]}


def _inst(engine: str | None, **kw) -> Instance:
    raw = _raw(engine, **kw)
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw)


def _features(engine: str | None, **kw) -> dict:
    return schedule_table(_inst(engine, **kw), "main").features


# --- the profiles and their loader ----------------------------------------------------------------
def test_the_catalog_ships_the_four_engines_and_two_experiment_variants():
    assert tuple(engine_names()) == PROFILES
    for name in PROFILES:  # every rule a file gives has a source or a stated assumption (else it fails to load)
        p = engines.load_engine(name)
        assert set(p.rules) <= set(dict(p.sources)) | set(dict(p.assumed)), name


def test_an_unknown_engine_is_an_input_error_listing_the_known_ones():
    with pytest.raises(InputError) as exc:
        engines.load_engine("tensorrt")
    assert "trtllm-0.14" in exc.value.expected and "vllm" in exc.value.expected and "sglang" in exc.value.expected


def test_an_instance_naming_an_unknown_engine_is_refused():
    with pytest.raises(InputError) as exc:
        instance_from_data(_raw("vllm-0.1"))
    assert exc.value.key == "system.engine" or "engine" in exc.value.message


def test_a_rule_without_a_source_is_refused(tmp_path: Path, monkeypatch):
    cat = tmp_path / "catalog" / "engines"
    cat.mkdir(parents=True)
    (cat / "bare.toml").write_text('name = "bare"\nmax_batch_size = 64\n')
    monkeypatch.setenv(INSTANCES_ENV, str(tmp_path))  # a user's own instances directory
    instances_dir.cache_clear()
    engines._load.cache_clear()
    try:
        with pytest.raises(InputError, match="without a source"):
            engines.load_engine("bare")
    finally:
        monkeypatch.undo()
        instances_dir.cache_clear()
        engines._load.cache_clear()


def _own_catalog(tmp_path: Path, monkeypatch, files: dict[str, str]) -> None:
    cat = tmp_path / "catalog" / "engines"
    cat.mkdir(parents=True)
    for name, text in files.items():
        (cat / f"{name}.toml").write_text(text)
    monkeypatch.setenv(INSTANCES_ENV, str(tmp_path))
    instances_dir.cache_clear()
    engines._load.cache_clear()


@pytest.mark.parametrize(("text", "match"), [
    ('name = "h"\nhost_us_per_sequence = 5.0\n', "without a source"),
    ('name = "h"\nhost_us_per_sequence = -1.0\n[assumed]\nhost_us_per_sequence = "t"\n', "malformed engine rule"),
    ('name = "h"\nhost_us_per_sequence = "20"\n[assumed]\nhost_us_per_sequence = "t"\n', "malformed engine rule"),
    ('name = "h"\nhost_us_per_sequence = true\n[assumed]\nhost_us_per_sequence = "t"\n', "malformed engine rule"),
])
def test_a_host_time_without_a_source_or_of_no_number_of_microseconds_is_refused(tmp_path: Path, monkeypatch,
                                                                                 text, match):
    _own_catalog(tmp_path, monkeypatch, {"h": text})
    try:
        with pytest.raises(InputError, match=match):
            engines.load_engine("h")
    finally:
        monkeypatch.undo()
        instances_dir.cache_clear()
        engines._load.cache_clear()


def test_a_host_time_with_a_stated_assumption_loads_and_an_integer_reads_as_microseconds(tmp_path: Path, monkeypatch):
    _own_catalog(tmp_path, monkeypatch, {"h": 'name = "h"\nhost_us_per_sequence = 7\n[assumed]\nhost_us_per_sequence = "t"\n'})
    try:
        assert engines.rules_of("h").host_us_per_sequence == 7.0
    finally:
        monkeypatch.undo()
        instances_dir.cache_clear()
        engines._load.cache_clear()


def test_vllm_defaults_depend_on_the_chip_as_its_arg_utils_says():
    vllm = engines.load_engine("vllm")
    h100, a100, l40s = vllm.for_chip("h100-sxm", 80), vllm.for_chip("a100-sxm", 80), vllm.for_chip("l40s", 48)
    assert (h100.max_batch_size, h100.max_num_tokens) == (1024, 8192)
    assert (a100.max_batch_size, a100.max_num_tokens) == (256, 2048)
    assert (l40s.max_batch_size, l40s.max_num_tokens) == (256, 2048)


def test_sglang_chunk_size_by_memory():
    sglang = engines.load_engine("sglang")
    assert sglang.for_chip("h100-sxm", 80).max_num_tokens == 8192
    assert sglang.for_chip("x", 180).max_num_tokens == 16384
    assert sglang.for_chip("x", 24).max_num_tokens == 2048
    assert sglang.for_chip().max_batch_size is None  # unknown: not applied


def test_a_variant_changes_one_rule_of_its_base():
    base, var = engines.rules_of("trtllm-0.14"), engines.rules_of("trtllm-0.14-fastest-allreduce")
    assert (base.allreduce, var.allreduce) == ("nccl", "fastest")
    assert {k: v for k, v in vars(base).items() if k not in ("engine", "allreduce")} == \
           {k: v for k, v in vars(var).items() if k not in ("engine", "allreduce")}


# --- an instance's system.engine -------------------------------------------------------------------
def test_no_engine_is_the_physics_alone():
    assert engines.instance_rules(_inst(None)) is engines.PHYSICS
    p = engines.PHYSICS
    assert (p.max_batch_size, p.max_num_tokens, p.decoder_state, p.kv_cache, p.allreduce, p.ep_dispatch) == \
           (None, None, "none", "weights", None, None)
    assert engines.allreduce_mode(_inst(None)) == "fastest"
    f = _features(None)
    assert "prefill.extra_iterations" not in f  # no token budget: no extra iterations
    assert f["decoder_state_per_device_B"][0] == 0  # no decoding state


def test_no_engine_charges_no_decoding_state_and_trtllm_restores_it():
    phys, trt = _features(None), _features("trtllm-0.14")
    assert trt["decoder_state_per_device_B"][0] == 16 * 2_950_976 == 47_215_616
    assert trt["memory_local_B"][0] - phys["memory_local_B"][0] == 47_215_616
    assert trt["kv_per_device_B"][0] == phys["kv_per_device_B"][0]  # an FP8 checkpoint: FP8 KV both ways


def test_no_engine_runs_the_fastest_allreduce_and_trtllm_restores_nccl():
    kw = {"workload": "llama-3.1-70b", "devices": 8, "isl": 2048, "osl": 128,
          "decisions": {"tp": [8], "pp": [1], "batch": [64]}}
    phys, trt = _features(None, **kw), _features("trtllm-0.14", **kw)
    assert phys["decode.steps_scale_up"][0] == 160 * 2 + 7 == 327
    assert trt["decode.steps_scale_up"][0] == 160 * 14 + 7 == 2247
    for col in ("decode.bytes_scale_up", "decode.steps_scale_up", "prefill.bytes_scale_up"):
        assert phys[col][0] == _features(None, allreduce="fastest", **kw)[col][0], col
        assert trt[col][0] == _features(None, allreduce="nccl", **kw)[col][0], col
    assert phys["decode.bytes_scale_up"][0] < trt["decode.bytes_scale_up"][0]  # in the switch: fewer bytes


def test_a_measurement_rows_instance_keeps_the_validations_rules():
    """A row's instance (calibration.engine.row_instance) is charged its batch's decoding state and
    runs NCCL's all-reduce where its engine names none (here: an unknown engine), as the fit was made."""
    from codesign.calibration.engine import ROW_RULES, row_instance
    from codesign.calibration.rows import Row

    row = Row(id="r", model="llama-3.1-8b", gpu="h100-sxm", num_gpus=1, tp=1, pp=1, ep=1, attention_dp=1,
              precision="fp8", isl=8000, osl=8, concurrency=None, metric="output_tokens_per_s", value=1.0)
    assert row.engine is None and row.rules is engines.PHYSICS
    inst = row_instance(row, 16)
    assert engines.instance_rules(inst) is ROW_RULES
    assert engines.allreduce_mode(inst) == "nccl"
    assert schedule_table(inst, "main").features["decoder_state_per_device_B"][0] == 47_215_616


def test_the_engines_token_budget_reaches_the_instance():
    assert _features("vllm")["prefill.extra_iterations"][0] == 8
    # the workload's own budget wins over the engine's: 16 x 8,008 / 65,536 < 8, no extra iteration
    raw = _raw("vllm")
    raw["workloads"][0]["max_tokens_per_iteration"] = 65536
    inst = Instance(InstanceFile.model_validate(raw), source=None, raw=raw)
    assert schedule_table(inst, "main").features["prefill.extra_iterations"][0] == 0


def test_the_decoding_state_is_the_engines():
    assert _features(None)["decoder_state_per_device_B"][0] == 0
    assert _features("trtllm-0.14")["decoder_state_per_device_B"][0] == 16 * 2_950_976 == 47_215_616
    assert _features("trtllm-1.x")["decoder_state_per_device_B"][0] == 47_215_616
    assert _features("vllm")["decoder_state_per_device_B"][0] == 0


def _steps(engine: str | None, batch: int) -> dict:
    inst = _inst(engine, decisions={"tp": [1], "pp": [1], "batch": [batch]})
    return evaluate(inst, inst.baseline()).workload_metrics["main"]


def test_trtllm_1x_pays_20_us_per_sequence_of_a_step_and_the_others_nothing():
    for batch, host_s in ((16, 320e-6), (64, 1280e-6)):
        phys, old, new = _steps(None, batch), _steps("trtllm-0.14", batch), _steps("trtllm-1.x", batch)
        for phase in ("decode", "prefill"):
            assert new[f"{phase}_step.sequences"] == batch
            assert new[f"{phase}_step.host_s"] == pytest.approx(host_s, rel=1e-12)
            assert phys[f"{phase}_step.host_s"] == old[f"{phase}_step.host_s"] == 0.0
            assert new[f"{phase}_step_s"] - phys[f"{phase}_step_s"] == pytest.approx(host_s, rel=1e-9)
        assert old["decode_step_s"] == phys["decode_step_s"]
    # the variant keeps its base's host time; vLLM and SGLang state none
    assert engines.rules_of("trtllm-1.x-all-to-all").host_us_per_sequence == 20.0
    assert engines.rules_of("vllm").host_us_per_sequence == engines.rules_of("sglang").host_us_per_sequence == 0.0


def test_the_engines_host_time_adds_to_the_calibrations_in_the_hardware_column(tmp_path: Path):
    """s_per_sequence = (calibration's + engine's) x 1e-6: 20 us under trtllm-1.x with the shipped
    calibration (0), 20 + 4 = 24 us with a calibration giving the H100 4 us of its own."""
    def column(engine: str | None, calibration=None) -> float:
        raw = _raw(engine)
        inst = Instance(InstanceFile.model_validate(raw), source=None, raw=raw, calibration=calibration)
        return float(hardware_table(inst).features["s_per_sequence"][0])

    assert column("trtllm-1.x") == pytest.approx(20e-6, rel=1e-12)
    assert column("trtllm-0.14") == column(None) == 0.0
    mine = tmp_path / "host.toml"
    mine.write_text(shipped_path().read_text().replace("[chips.h100-sxm]\n", "[chips.h100-sxm]\nhost_us_per_sequence = 4.0\n", 1))
    cal = load_calibration(mine)
    assert column("trtllm-1.x", cal) == pytest.approx(24e-6, rel=1e-12)
    assert column(None, cal) == pytest.approx(4e-6, rel=1e-12)


def test_brute_force_equals_both_solvers_with_the_engines_host_time(solvers_match_brute_force):
    """The host time is a hardware column times the schedule's sequences, as the calibration's was:
    the MIP stays exact. Llama 8B FP8 on an H100 or H200 under trtllm-1.x, TP 1 or 2, 16 to 1,024
    sequences (decode-heavy 128/1024, where 20 us x 1,024 = 20.5 ms per step matters)."""
    raw = _raw("trtllm-1.x", isl=128, osl=1024, devices=2,
               decisions={"tp": [1, 2], "pp": [1], "batch": [16, 256, 1024]})
    raw["hardware"]["decisions"] = {"chip": ["h100-sxm", "h200-sxm"]}
    best = solvers_match_brute_force(Instance(InstanceFile.model_validate(raw), source=None, raw=raw))
    assert best.feasible


def test_the_kv_cache_precision_is_the_engines_rule():
    phys, vllm = _features(None), _features("vllm")
    assert vllm["kv_per_device_B"][0] == 2 * phys["kv_per_device_B"][0]  # BF16 for an FP8 checkpoint
    # a stated kv_precision wins
    raw = _raw("vllm")
    raw["workloads"][0]["kv_precision"] = "fp8"
    inst = Instance(InstanceFile.model_validate(raw), source=None, raw=raw)
    assert schedule_table(inst, "main").features["kv_per_device_B"][0] == phys["kv_per_device_B"][0]


def test_the_engines_maximum_batch_removes_larger_batches():
    kw = {"decisions": {"tp": [1], "pp": [1], "batch": [1024, 2048]}}
    assert list(schedule_table(_inst("vllm", **kw), "main").decisions["batch"]) == [1024]
    assert list(schedule_table(_inst(None, **kw), "main").decisions["batch"]) == [1024, 2048]
    inst = instance_from_data(_raw("vllm", decisions={"tp": [1], "pp": [1], "batch": [2048]}))
    ev = evaluate(inst, inst.baseline())
    assert not ev.feasible and any("maximum batch of 1024" in p for p in ev.structural)


def test_the_engines_allreduce_is_the_systems_unless_it_names_one():
    kw = {"workload": "llama-3.1-70b", "devices": 8, "isl": 2048, "osl": 128,
          "decisions": {"tp": [8], "pp": [1], "batch": [64]}}
    var = _features("trtllm-0.14-fastest-allreduce", **kw)
    pinned = _features(None, allreduce="fastest", **kw)
    nccl = _features(None, allreduce="nccl", **kw)
    assert var["decode.bytes_scale_up"][0] == pinned["decode.bytes_scale_up"][0]
    assert var["decode.steps_scale_up"][0] == pinned["decode.steps_scale_up"][0]
    assert var["decode.steps_scale_up"][0] != nccl["decode.steps_scale_up"][0]
    # system.allreduce, where given, wins over the engine's
    both = _features("trtllm-0.14-fastest-allreduce", allreduce="nccl", **kw)
    assert both["decode.steps_scale_up"][0] == nccl["decode.steps_scale_up"][0]


def test_the_engines_ep_dispatch():
    """Mixtral 8x7B (top-2) at TP 8, EP 8 > 2: the physics sends tokens by all-to-all (two per MoE
    layer, 32 layers: 64 calls); trtllm-1.x gathers them (none)."""
    kw = {"workload": "mixtral-8x7b", "devices": 8, "isl": 128, "osl": 128,
          "decisions": {"tp": [8], "pp": [1], "ep": [8], "batch": [64]}}
    gather = _features("trtllm-1.x", **kw)
    # trtllm-1.x's all-reduce is NCCL's: the physics is compared under the same
    explicit = _features(None, allreduce="nccl", **{**kw, "decisions": {**kw["decisions"], "ep_all_to_all": [False]}})
    a2a = _features("trtllm-1.x-all-to-all", **kw)
    phys = _features(None, allreduce="nccl", **kw)
    for col in ("decode.bytes_scale_up", "decode.steps_scale_up"):
        assert gather[col][0] == explicit[col][0], col
        assert a2a[col][0] == phys[col][0], col
    assert gather["decode.bytes_scale_up"][0] != phys["decode.bytes_scale_up"][0]


def test_an_engine_whose_rules_differ_between_the_chips_to_choose_is_refused():
    """The H100 (80 GiB) and H200 (141 GiB) are under SGLang's 160 GiB tier (8,192 tokens), the
    B200 (180 GiB) is not (16,384). vLLM's memory defaults treat all three alike (70 GiB or more,
    no A100), its all-reduce size bands do not (compute capability 9.0 against 10.0)."""
    raw = _raw("sglang")
    raw["hardware"]["decisions"] = {"chip": ["h100-sxm", "h200-sxm", "b200"]}
    with pytest.raises(InputError, match="other rules on some of the chips"):
        instance_from_data(raw)
    raw["system"]["engine"] = "vllm"
    with pytest.raises(InputError, match="other rules on some of the chips"):
        instance_from_data(raw)
    raw["hardware"]["decisions"] = {"chip": ["h100-sxm", "h200-sxm"]}  # one scale-up link (the physics' all-reduce)
    assert engines.instance_rules(instance_from_data(raw)).max_num_tokens == 8192


def test_no_engine_over_chips_of_different_links_asks_for_an_allreduce():
    """The physics' all-reduce is the fastest per collective on one scale-up link: the H100's
    NVLink 4 and the B200's NVLink 5 differ, so an instance choosing between them names an engine
    or pins ``system.allreduce``."""
    raw = _raw(None)
    raw["hardware"]["decisions"] = {"chip": ["h100-sxm", "b200"]}
    with pytest.raises(InputError, match="'fastest' \\(the physics default: the instance names no engine\\) picks per "
                       "collective on one scale-up link") as err:
        instance_from_data(raw)
    assert "name an engine" in str(err.value.suggestion)
    raw["system"]["allreduce"] = "nccl"
    assert engines.allreduce_mode(instance_from_data(raw)) == "nccl"
    raw["system"] = {**_raw("trtllm-0.14")["system"]}
    assert engines.allreduce_mode(instance_from_data(raw)) == "nccl"
