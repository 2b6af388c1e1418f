"""Random numbers on zyx: ``torch.manual_seed`` makes every random op reproducible, the RNG state
saves and restores the sequence, and the distributions are what PyTorch promises.

zyx's generator is counter-based (torch_zyx/record/random.py), so values differ from CPU torch's
Mersenne Twister: tests compare zyx with itself and check distribution properties.
"""

import pytest
import torch

DRAWS = {
    "rand": lambda: torch.rand(64, device="zyx"),
    "randn": lambda: torch.randn(64, device="zyx"),
    "randint": lambda: torch.randint(0, 100, (64,), device="zyx"),
    "rand_like": lambda: torch.rand_like(torch.zeros(64, device="zyx")),
    "dropout": lambda: torch.nn.functional.dropout(torch.ones(64, device="zyx"), 0.5),
    "bernoulli": lambda: torch.bernoulli(torch.full((64,), 0.3, device="zyx")),
    "bernoulli_": lambda: torch.empty(64, device="zyx").bernoulli_(0.5),
    "normal_": lambda: torch.empty(64, device="zyx").normal_(2.0, 3.0),
    "uniform_": lambda: torch.empty(64, device="zyx").uniform_(-1.0, 1.0),
    "randperm": lambda: torch.randperm(64, device="zyx"),
}


@pytest.fixture
def no_fallback(monkeypatch):
    monkeypatch.setattr("torch_zyx.config.CONFIG.cpu_fallback", False)


def _draw(name, seed):
    torch.manual_seed(seed)
    first = DRAWS[name]().cpu()
    second = DRAWS[name]().cpu()  # the next draw continues the sequence
    return first, second


@pytest.mark.parametrize("name", list(DRAWS))
def test_manual_seed_reproducible(name, no_fallback):
    a1, a2 = _draw(name, 0)
    b1, b2 = _draw(name, 0)
    c1, _ = _draw(name, 1)
    assert torch.equal(a1, b1) and torch.equal(a2, b2)
    assert not torch.equal(a1, a2)  # successive draws differ
    assert not torch.equal(a1, c1)  # another seed gives other values


def test_rng_state_restores_sequence(no_fallback):
    torch.manual_seed(3)
    torch.rand(10, device="zyx")
    state = torch.zyx.get_rng_state()
    expected = [torch.randn(5, device="zyx").cpu(), torch.randperm(7, device="zyx").cpu()]
    torch.rand(10, device="zyx")
    torch.zyx.set_rng_state(state)
    got = [torch.randn(5, device="zyx").cpu(), torch.randperm(7, device="zyx").cpu()]
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
    # fork_rng restores the zyx state on exit, as it does for CUDA.
    with torch.random.fork_rng(device_type="zyx"):
        inside = torch.rand(4, device="zyx").cpu()
    assert torch.equal(torch.rand(4, device="zyx").cpu(), inside)


def test_distributions(no_fallback):
    torch.manual_seed(0)
    n = 1 << 16
    z = torch.randn(n, device="zyx").cpu()
    assert abs(z.mean().item()) < 0.02 and abs(z.std().item() - 1) < 0.02
    normal = torch.empty(n, device="zyx").normal_(2.0, 3.0).cpu()
    assert abs(normal.mean().item() - 2) < 0.06 and abs(normal.std().item() - 3) < 0.06
    u = torch.rand(n, device="zyx").cpu()
    assert u.min().item() >= 0 and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.01
    uniform = torch.empty(n, device="zyx").uniform_(-2.0, 3.0).cpu()
    assert uniform.min().item() >= -2 and uniform.max().item() < 3
    ints = torch.randint(-5, 7, (n,), device="zyx").cpu()
    assert ints.dtype == torch.int64 and ints.min().item() == -5 and ints.max().item() == 6
    assert torch.bincount(ints + 5).min().item() > n / 12 * 0.9  # every value, about equally often
    b = torch.bernoulli(torch.full((n,), 0.3, device="zyx")).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.3) < 0.01
    # The functional forms compiled graphs record: bernoulli with a float p, normal on a shape.
    like = torch.empty(n, dtype=torch.float64, device="zyx")
    bp = torch.bernoulli(like, 0.25)
    assert bp.dtype == torch.float64
    bp = bp.cpu()
    assert set(bp.unique().tolist()) <= {0.0, 1.0} and abs(bp.mean().item() - 0.25) < 0.01
    nf = torch.ops.aten.normal_functional(like, 2.0, 3.0).cpu()
    assert nf.dtype == torch.float64
    assert abs(nf.mean().item() - 2) < 0.06 and abs(nf.std().item() - 3) < 0.06


def test_dropout_zeroes_half_and_scales(no_fallback):
    torch.manual_seed(0)
    x = torch.full((4096,), 3.0, device="zyx", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.5)
    out = y.cpu()
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.5) < 0.03
    assert torch.all(out[kept] == 6.0)
    y.sum().backward()  # the same mask scales the gradient
    assert torch.equal(x.grad.cpu() != 0, kept) and torch.all(x.grad.cpu()[kept] == 2.0)
    assert torch.nn.functional.dropout(x, 0.5, training=False).cpu().equal(x.detach().cpu())


@pytest.mark.parametrize("n", [1, 2, 10, 300])
def test_randperm_is_permutation(n, no_fallback):
    torch.manual_seed(n)
    p = torch.randperm(n, device="zyx")
    assert p.dtype == torch.int64 and p.shape == (n,)
    assert torch.equal(p.cpu().sort().values, torch.arange(n))
    if n == 300:
        assert not torch.equal(p.cpu(), torch.arange(n))
        # Each value lands in each half about equally often over several draws (no position bias).
        draws = torch.stack([torch.randperm(n, device="zyx").cpu() for _ in range(20)])
        assert abs((draws[:, : n // 2] < n // 2).float().mean().item() - 0.5) < 0.05


def test_torch_distributions_validate_on_device(no_fallback):
    """torch.distributions check their arguments and samples with ``_is_all_true`` (a 0-d bool of
    a bool tensor): computed on zyx, raising as on CPU torch for an invalid argument."""
    torch.manual_seed(0)
    normal = torch.distributions.Normal(torch.zeros(3, device="zyx"), torch.ones(3, device="zyx"))
    log_prob = normal.log_prob(torch.tensor([0.0, 1.0, -2.0], device="zyx"))
    reference = torch.distributions.Normal(torch.zeros(3), torch.ones(3))
    expected = reference.log_prob(torch.tensor([0.0, 1.0, -2.0]))
    torch.testing.assert_close(log_prob.cpu(), expected)
    classes = torch.distributions.Categorical(logits=torch.zeros(64, 5, device="zyx")).sample()
    assert classes.device.type == "zyx" and classes.shape == (64,)
    assert 0 <= int(classes.min()) and int(classes.max()) < 5
    with pytest.raises(ValueError, match="scale"):
        # (explicitly: Dynamo turns the default off for the whole process once torch.compile ran,
        # as test_compile.py does in the same worker)
        torch.distributions.Normal(torch.zeros(2, device="zyx"), torch.tensor([1.0, -1.0], device="zyx"),
                                   validate_args=True)
    for values in ([True, True], [True, False], [False, False], []):
        cpu = torch.tensor(values, dtype=torch.bool)
        zyx = cpu.to("zyx")
        assert torch._is_all_true(zyx).item() == torch._is_all_true(cpu).item()
        assert torch._is_any_true(zyx).item() == torch._is_any_true(cpu).item()
        assert torch._is_all_true(zyx).shape == ()


GENERATOR_DRAWS = {
    "rand": lambda g: torch.rand(16, device="zyx", generator=g),
    "randn": lambda g: torch.randn(16, device="zyx", generator=g),
    "randint": lambda g: torch.randint(0, 100, (16,), device="zyx", generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((16,), 0.5, device="zyx"), generator=g),
    "multinomial": lambda g: torch.multinomial(torch.ones(8, device="zyx"), 4, generator=g),
    "multinomial replacement": lambda g: torch.multinomial(torch.ones(8, device="zyx"), 16, True,
                                                           generator=g),
    "randperm": lambda g: torch.randperm(16, device="zyx", generator=g),
    "normal tensor": lambda g: torch.normal(torch.zeros(16, device="zyx"), 2.0, generator=g),
    "exponential_": lambda g: torch.empty(16, device="zyx").exponential_(generator=g),
    "geometric_": lambda g: torch.empty(16, device="zyx").geometric_(0.3, generator=g),
    "log_normal_": lambda g: torch.empty(16, device="zyx").log_normal_(generator=g),
    "cauchy_": lambda g: torch.empty(16, device="zyx").cauchy_(generator=g),
    "random_": lambda g: torch.empty(16, device="zyx").random_(0, 50, generator=g),
}


@pytest.fixture
def zyx_generators():
    from torch_zyx.integration import device_guard

    if not device_guard.native_hooks():
        pytest.skip("torch.Generator(device='zyx') needs zyx's C++ hooks (no C++ compiler, or ZYX_NATIVE=0)")


@pytest.mark.parametrize("name", list(GENERATOR_DRAWS))
def test_generator_objects_draw_their_own_sequence(name, no_fallback, zyx_generators):
    """A zyx generator's draws depend on its seed only: two generators seeded alike agree, the
    default state neither moves nor matters, and get_state/set_state replays a draw."""
    draw = GENERATOR_DRAWS[name]
    first = torch.Generator(device="zyx").manual_seed(5)
    torch.manual_seed(0)
    expected = draw(first).cpu()
    after_default = torch.rand(8, device="zyx").cpu()
    second = torch.Generator(device="zyx").manual_seed(5)
    torch.manual_seed(1)
    assert torch.equal(draw(second).cpu(), expected)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(8, device="zyx").cpu(), after_default)
    state = first.get_state()
    again = draw(first).cpu()
    assert not torch.equal(again, expected) or name == "multinomial"
    first.set_state(state)
    assert torch.equal(draw(first).cpu(), again)


def test_generator_of_another_device_is_refused(zyx_generators):
    with pytest.raises(RuntimeError, match="Expected a 'zyx' device type for generator but found 'cpu'"):
        torch.rand(3, device="zyx", generator=torch.Generator())
    generator = torch.Generator(device="zyx")
    # ... and a zyx generator given to CPU ops, in CPU torch's words for a CUDA one
    for draw in (lambda: torch.rand(3, generator=generator),
                 lambda: torch.empty(3).normal_(generator=generator),
                 lambda: torch.randperm(4, generator=generator),
                 lambda: torch.multinomial(torch.ones(3), 2, generator=generator)):
        with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'zyx'"):
            draw()
    assert generator.device == torch.device("zyx", 0)
    assert generator.initial_seed() == torch.Generator(device="zyx").initial_seed()
    assert generator.seed() != generator.manual_seed(3).initial_seed()


def _ks_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = a.flatten().double().sort().values, b.flatten().double().sort().values
    points = torch.cat([a, b]).unique()
    cdf_a = torch.searchsorted(a, points, right=True).double() / len(a)
    cdf_b = torch.searchsorted(b, points, right=True).double() / len(b)
    return (cdf_a - cdf_b).abs().max().item()


# Rejection samplers (ops/random/rejection.py) against CPU torch's: 20000 draws each; the KS critical
# value at the 0.1% level is ~0.0195 (values differ draw by draw: another generator).
REJECTION_SAMPLERS = {
    **{f"gamma {a}": (torch._standard_gamma, a) for a in (0.05, 1.0, 30.0)},
    **{f"poisson {r}": (torch.poisson, r) for r in (0.5, 9.9, 15.0, 1e5)},
}


@pytest.mark.parametrize("attempts", [None, 1])
@pytest.mark.parametrize("name", list(REJECTION_SAMPLERS))
def test_rejection_samplers_match_cpu_distribution(name, attempts, no_fallback, monkeypatch):
    """``attempts=1``: one attempt per round, so elements take several rounds (read-backs)."""
    if attempts is not None:
        monkeypatch.setattr("torch_zyx.ops.random.rejection._ATTEMPTS", attempts)
    op, parameter = REJECTION_SAMPLERS[name]
    torch.manual_seed(0)
    values = torch.full((20000,), parameter)
    got, want = op(values.to("zyx")).cpu(), op(values)
    assert got.dtype == want.dtype and _ks_distance(got, want) < 0.0195


def test_dirichlet_matches_cpu_distribution(no_fallback):
    torch.manual_seed(0)
    alpha = torch.tensor([0.2, 1.0, 5.0]).expand(20000, 3).contiguous()
    got, want = torch._sample_dirichlet(alpha.to("zyx")).cpu(), torch._sample_dirichlet(alpha)
    assert all(_ks_distance(got[:, i], want[:, i]) < 0.0195 for i in range(3))
    torch.testing.assert_close(got.sum(1), torch.ones(20000))


def test_rejection_sampler_edge_values_match_cpu(no_fallback):
    """Shape 0 gives the smallest normal number (ATen's clamp; a NaN shape too), rate 0 gives 0,
    a negative or NaN rate raises ATen's error; empty inputs give empty results."""
    alpha = torch.tensor([0.0, 1e-30, float("inf"), float("nan")])
    assert torch.equal(torch._standard_gamma(alpha.to("zyx")).cpu(), torch._standard_gamma(alpha))
    rows = torch.tensor([[0.0, 1.0], [float("nan"), 1.0]])
    assert torch.equal(torch._sample_dirichlet(rows.to("zyx")).cpu(), torch._sample_dirichlet(rows))
    assert torch.poisson(torch.zeros(3, device="zyx")).cpu().tolist() == [0.0, 0.0, 0.0]
    for bad in (-1.0, float("nan")):
        with pytest.raises(RuntimeError, match="invalid Poisson rate, expected rate to be non-negative"):
            torch.poisson(torch.tensor([2.0, bad], device="zyx"))
    assert torch.poisson(torch.empty(0, 3, device="zyx")).shape == (0, 3)


@pytest.mark.parametrize("name", ["Gamma", "Beta", "Dirichlet", "Chi2", "StudentT", "Poisson",
                                  "NegativeBinomial"])
def test_distributions_sample_on_device(name, no_fallback):
    D = torch.distributions
    a = torch.tensor([0.5, 2.0, 3.0], device="zyx")
    make = {"Gamma": lambda: D.Gamma(a, a), "Beta": lambda: D.Beta(a, a), "Dirichlet": lambda: D.Dirichlet(a),
            "Chi2": lambda: D.Chi2(a), "StudentT": lambda: D.StudentT(a + 2), "Poisson": lambda: D.Poisson(a),
            "NegativeBinomial": lambda: D.NegativeBinomial(3, probs=a / 4)}[name]
    torch.manual_seed(0)
    distribution = make()
    samples = distribution.sample((4000,))
    assert samples.device.type == "zyx" and samples.shape == (4000, 3)
    assert distribution.log_prob(samples[:10]).isfinite().all()
    torch.testing.assert_close(samples.float().mean(0).cpu(), distribution.mean.cpu(), rtol=0.1, atol=0.05)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_standard_gamma_grad_matches_cpu(dtype, no_fallback):
    """The reparameterized gradient in all three regimes (small draws, large alpha near and far
    from its mean, the rational approximation); Gamma.rsample's backward uses it."""
    alpha = torch.tensor([0.1, 0.5, 1.0, 3.0, 7.9, 8.5, 20.0, 200.0], dtype=dtype).repeat_interleave(5)
    ratio = torch.tensor([0.01, 0.3, 0.95, 1.05, 4.0], dtype=dtype).repeat(8)
    draws = ratio * alpha.clamp(min=1.0)
    got = torch._standard_gamma_grad(alpha.to("zyx"), draws.to("zyx")).cpu()
    torch.testing.assert_close(got, torch._standard_gamma_grad(alpha, draws))
    concentration = torch.tensor([0.5, 2.0, 9.0], device="zyx", requires_grad=True)
    torch.distributions.Gamma(concentration, 1.0).rsample((4,)).pow(2).sum().backward()
    assert concentration.grad.device.type == "zyx" and concentration.grad.isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dirichlet_grad_matches_cpu(dtype, no_fallback):
    """The Dirichlet/Beta reparameterized gradient in its four regimes (draws near 0, near 1,
    both parameters large, the rational correction); Beta and Dirichlet rsample backward."""
    generator = torch.Generator().manual_seed(0)
    alpha = torch.tensor([0.3, 1.0, 2.5, 7.0, 20.0], dtype=dtype).repeat_interleave(25)
    total = alpha + torch.tensor([0.4, 1.5, 3.0, 8.0, 30.0], dtype=dtype).repeat(25)
    x = torch.rand(125, generator=generator, dtype=dtype) * 0.98 + 0.01
    got = torch._dirichlet_grad(x.to("zyx"), alpha.to("zyx"), total.to("zyx")).cpu()
    torch.testing.assert_close(got, torch._dirichlet_grad(x, alpha, total), rtol=1e-5, atol=1e-7)
    for make in (lambda c: torch.distributions.Beta(c, c.flip(0)), torch.distributions.Dirichlet):
        concentration = torch.tensor([0.5, 2.0, 9.0], device="zyx", requires_grad=True)
        make(concentration).rsample((4,)).pow(2).sum().backward()
        assert concentration.grad.device.type == "zyx" and concentration.grad.isfinite().all()


@pytest.mark.parametrize("attempts", [None, 1])
@pytest.mark.parametrize("count, prob", [(5, 0.3), (20, 0.4), (100, 0.2), (1000, 0.9), (7, 0.7)])
def test_binomial_matches_cpu_distribution(count, prob, attempts, no_fallback, monkeypatch):
    """Inversion below count * p = 10, BTRS above, p > 0.5 through 1 - p; edge values as CPU."""
    if attempts is not None:
        monkeypatch.setattr("torch_zyx.ops.random.rejection._ATTEMPTS", attempts)
        monkeypatch.setattr("torch_zyx.ops.random.rejection._PRODUCT_TERMS", 2)
    torch.manual_seed(0)
    counts, probs = torch.full((20000,), float(count)), torch.full((20000,), prob)
    got = torch.binomial(counts.to("zyx"), probs.to("zyx")).cpu()
    assert _ks_distance(got, torch.binomial(counts, probs)) < 0.0195
    edge_counts = torch.tensor([0.0, 5, 5, 5, -1, 5])
    edge_probs = torch.tensor([0.5, 0, 1, float("nan"), 0.5, 0.5])
    got = torch.binomial(edge_counts.to("zyx"), edge_probs.to("zyx")).cpu()
    torch.testing.assert_close(got[:4], torch.binomial(edge_counts, edge_probs)[:4], equal_nan=True)
