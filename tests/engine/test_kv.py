"""KV-cache arithmetic behind the KV panel."""

from chatapp.engine.kv import fill, forecast_turns, pressure, turn_growth


def test_fill_is_a_clamped_fraction():
    assert fill(0, 1024) == 0.0
    assert fill(512, 1024) == 0.5
    assert fill(2048, 1024) == 1.0
    assert fill(10, 0) == 0.0


def test_pressure_thresholds():
    assert pressure(818, 1024) == "ok"  # 79.9%
    assert pressure(820, 1024) == "warn"  # 80.1%
    assert pressure(80, 100) == "warn"
    assert pressure(94, 100) == "warn"
    assert pressure(95, 100) == "critical"
    assert pressure(100, 100) == "critical"


def test_turn_growth_is_what_the_turn_wrote_past_the_reused_prefix():
    assert turn_growth(kv_used=69, cached_tokens=43) == 26
    assert turn_growth(kv_used=43, cached_tokens=0) == 43
    assert turn_growth(kv_used=3, cached_tokens=5) == 0
    assert turn_growth(kv_used=2444, cached_tokens=0, once=2159) == 285  # a first turn's system prompt and tools


def test_forecast_divides_free_cells_by_the_average_growth():
    assert forecast_turns(100, 1000, [100, 200]) == 6  # 900 free / 150
    assert forecast_turns(100, 1000, [300]) == 3
    assert forecast_turns(1000, 1000, [10]) == 0
    assert forecast_turns(1100, 1000, [10]) == 0


def test_forecast_without_history_is_unknown():
    assert forecast_turns(100, 1000, []) is None
    assert forecast_turns(100, 1000, [0, 0]) is None
