import pytest
import torch

from workers.model.pipelines.build import build_pipeline
from workers.model.pipelines.schedulers import SCHEDULERS, make_scheduler


@pytest.fixture(scope="module")
def config() -> object:
    return build_pipeline().scheduler.config


def test_dpm_solver_is_second_order_on_log_snr_with_a_safe_last_step(config: object) -> None:
    scheduler = make_scheduler("dpmsolver++", config)
    assert scheduler.config.algorithm_type == "dpmsolver++" and scheduler.config.solver_order == 2
    assert scheduler.config.use_lu_lambdas and scheduler.config.lower_order_final
    scheduler.set_timesteps(15)
    assert len(scheduler.timesteps) == 15
    assert scheduler.sigmas[-1] == 0 and scheduler.sigmas.dtype == torch.float32
    # Steps are evenly spaced in log-SNR: lambda = log(alpha / sigma) = -log(sigma).
    lambdas = -torch.log(scheduler.sigmas[:-1].double())
    gaps = lambdas.diff()
    assert torch.allclose(gaps, gaps.mean().expand_as(gaps), rtol=0.02)


@pytest.mark.parametrize("name", SCHEDULERS)
def test_each_scheduler_keeps_the_noise_schedule(config: object, name: str) -> None:
    scheduler = make_scheduler(name, config)
    assert scheduler.config.beta_schedule == "scaled_linear"
    assert scheduler.config.prediction_type == "epsilon"
    scheduler.set_timesteps(4)
    assert len(scheduler.timesteps) == 4


def test_unknown_scheduler_is_refused(config: object) -> None:
    with pytest.raises(ValueError, match="`scheduler` must be one of"):
        make_scheduler("pndm", config)
