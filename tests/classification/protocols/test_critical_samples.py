"""Tests for the critical samples' protocol
(skfed.classification._protocols._critical_samples): the clients' local duals
and their chunks, the server's pool and its reduction, the refinement
rounds."""

import itertools
import threading
import tracemalloc

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_classification, make_moons
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from skfed import FederatedRKHSClassifier
from skfed._engine._federation import ClientData, Federation
from skfed._testing import rkhs_paper_data
from skfed.classification._protocols import _critical_samples as rkhs_protocol
from skfed.classification._protocols._critical_samples import (
    _local_dual_step,
    _selection_rows,
    _server_pool,
)
from skfed.classification._solvers._svm import dense_dual
from skfed.kernel._multiwidth import AtomDictionary, gaussian_atoms


def svc_score(X, y, X_test, y_test):
    # The reference: SVC's defaults (RBF, C=1, gamma="scale"), untuned.
    return SVC(kernel="rbf").fit(X, y).score(X_test, y_test)


def _client(X, y):
    return ClientData(0, X, y, np.arange(len(y)), (1, 2, 3))


def test_client_sends_exactly_its_samples_with_positive_dual():
    X, y, _ = rkhs_paper_data(200, seed=6)
    widths = np.array([0.05, 0.1, 0.2])
    state, (X_sent, y_sent, lam_sent) = _local_dual_step(
        _client(X, y),
        None,
        None,
        widths=widths,
        n_problems=1,
        epsilon=0.0,
        upper=1.0,
        max_iter=200,
        tol=1e-6,
    )
    lam = state["local_dual"][:, 0]
    critical = np.flatnonzero(lam > 0)
    np.testing.assert_array_equal(state["sent"], critical)
    np.testing.assert_array_equal(X_sent, X[critical])
    np.testing.assert_allclose(lam_sent[:, 0], lam[critical])
    assert 0 < len(critical) < len(y)
    # Complementary slackness of the local (γ = 0) model: every sample left
    # behind meets its constraint y f(x) ≥ 1 - ε; critical ones are on or
    # inside the margin.
    ypm = np.where(y == 1, 1.0, -1.0)
    dictionary = AtomDictionary(X, X, widths, dtype=np.float64)
    Phi = dictionary.columns(np.arange(dictionary.n_atoms))
    fit = dense_dual(
        Phi, ypm, beta=1.0, epsilon=0.0, upper=1.0, bias=True, max_iter=200, tol=1e-6
    )
    margin = ypm * (Phi @ fit["coef"] + fit["intercept"])
    assert np.all(margin[lam == 0] >= 1 - 1e-2)
    assert np.all(margin[lam > 0] <= 1 + 1e-2)


def _local_peak(X, y, widths):
    tracemalloc.start()
    try:
        state, _ = _local_dual_step(
            _client(X, y),
            None,
            None,
            widths=widths,
            n_problems=1,
            epsilon=0.0,
            upper=1.0,
            max_iter=1000,
            tol=1e-4,
        )
        return state, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_client_step_holds_its_dictionary_once():
    # The client step took Φ[:, every atom], a copy of the Φ the dictionary
    # holds: peak memory 2.6 times Φ, now 1.6 (Φ, its distances, the Gram).
    X, y, _ = rkhs_paper_data(1000, seed=6)
    widths = np.geomspace(0.1, 0.5, 5)
    dictionary = AtomDictionary(X, X, widths)
    assert np.shares_memory(dictionary.columns(), dictionary._full)
    phi_bytes = 1000 * 5000 * 4
    _, peak = _local_peak(X, y, widths)
    assert peak < 2 * phi_bytes


def test_large_client_memory_grows_linearly_in_its_rows(monkeypatch):
    # The dense local dual holds Φ (n × n · n_widths) and ΦΦᵀ: O(n²), 40 GB
    # for a client of 100,000 rows. Above _LOCAL_ROWS rows a client solves
    # one dual per chunk, so doubling its rows doubles its memory at most.
    monkeypatch.setattr(rkhs_protocol, "_LOCAL_ROWS", 200)
    X, y, _ = rkhs_paper_data(1600, seed=6)
    widths = np.geomspace(0.1, 0.5, 5)
    state, peak_half = _local_peak(X[:800], y[:800], widths)
    _, peak_full = _local_peak(X, y, widths)
    assert peak_full < 1.5 * peak_half
    # Every chunk's critical samples are sent: some, not all.
    lam = state["local_dual"][:, 0]
    assert 0 < np.sum(lam > 0) < len(lam)


def test_chunks_follow_the_rows_values_not_their_storage(monkeypatch):
    # Chunks are cut from the rows in an order fixed by their values: the
    # same rows stored in another order send the same samples and the fit
    # gives the same model.
    monkeypatch.setattr(rkhs_protocol, "_LOCAL_ROWS", 60)
    X, y, _ = rkhs_paper_data(400, seed=3)
    parts = np.arange(400) % 2
    perm = np.random.RandomState(0).permutation(400)
    a = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=parts)
    b = FederatedRKHSClassifier(random_state=0).fit(
        X[perm], y[perm], partitions=parts[perm]
    )
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(
        np.sort(a.kernel_centers_, axis=0),
        np.sort(b.kernel_centers_, axis=0),
        rtol=1e-6,
    )
    assert a.communication_.upload_floats == b.communication_.upload_floats


def test_chunked_local_duals_stay_close_to_svc(monkeypatch):
    # Chunks of 100 rows on clients of 300: each chunk has its own margin,
    # the refinement rounds send what the global model violates.
    monkeypatch.setattr(rkhs_protocol, "_LOCAL_ROWS", 100)
    X, y = make_moons(1200, noise=0.25, random_state=0)
    X_test, y_test = make_moons(2000, noise=0.25, random_state=1)
    est = FederatedRKHSClassifier(random_state=0).fit(
        X, y, partitions=np.arange(1200) % 4
    )
    assert est.score(X_test, y_test) >= svc_score(X, y, X_test, y_test) - 0.02


def test_one_vs_rest_problems_share_each_chunks_gram_matrix(monkeypatch):
    # A chunk's one-vs-rest problems are posed on the same atoms: libsvm's
    # Gram matrix is formed once per chunk (not per problem), and each
    # problem's λ is the one it gets when solved alone.
    monkeypatch.setattr(rkhs_protocol, "_LOCAL_ROWS", 70)
    X, y = load_digits(return_X_y=True)
    X, y = X[:300] / 16.0, y[:300] % 4
    widths = np.array([2.0, 4.0])
    options = {"epsilon": 0.3, "upper": 1.0, "max_iter": 200, "tol": 1e-3}
    grams = []
    dense_gram = rkhs_protocol.dense_gram

    def counted(Phi):
        grams.append(Phi.shape)
        return dense_gram(Phi)

    monkeypatch.setattr(rkhs_protocol, "dense_gram", counted)
    lam, _ = rkhs_protocol._chunked_local_duals(
        X, y, widths=widths, n_problems=4, **options
    )
    chunks = rkhs_protocol._local_chunks(X)
    assert len(chunks) == len(grams) == 5
    for chunk in chunks:
        Phi = AtomDictionary(X[chunk], X[chunk], widths).columns()
        for p in range(4):
            ypm = np.where(y[chunk] == p, 1.0, -1.0)
            alone = dense_dual(Phi, ypm, beta=1.0, bias=True, **options)
            np.testing.assert_array_equal(lam[chunk, p], alone["lam"])


def _spy_on_server_pools(monkeypatch):
    pools = []
    solve = rkhs_protocol._server_solve

    def spy(X, y_code, *args, **kwargs):
        pools.append((X, y_code))
        return solve(X, y_code, *args, **kwargs)

    monkeypatch.setattr(rkhs_protocol, "_server_solve", spy)
    return pools


def test_server_reduces_a_large_pool_without_communication(monkeypatch):
    # Forty clients of 30 rows: each sends about as many critical samples as
    # a chunk of a large client, and the pool grows with the clients. Above
    # _SERVER_ROWS the server reduces it by the clients' own chunked rule;
    # the samples it drops stay with it and are checked against the model.
    X, y = make_moons(1200, noise=0.25, random_state=0)
    X_test, y_test = make_moons(2000, noise=0.25, random_state=1)
    parts = np.arange(1200) % 40

    pools = _spy_on_server_pools(monkeypatch)
    whole = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=parts)
    critical = sum(len(v) for v in whole.critical_samples_.values())
    assert len(pools[0][0]) == critical

    pools.clear()
    monkeypatch.setattr(rkhs_protocol, "_SERVER_ROWS", 100)
    reduced = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=parts)
    assert len(pools[0][0]) < critical / 2
    # The one-shot round is the clients' business: the same uploads.
    log_whole, log_reduced = whole.communication_, reduced.communication_
    for direction in ("upload", "download"):
        assert (
            log_reduced.floats_by_name(direction)["critical samples"]
            == log_whole.floats_by_name(direction)["critical samples"]
        )
    assert reduced.critical_samples_.keys() == whole.critical_samples_.keys()
    for cid, idx in whole.critical_samples_.items():
        np.testing.assert_array_equal(reduced.critical_samples_[cid], idx)
    svc = svc_score(X, y, X_test, y_test)
    assert reduced.score(X_test, y_test) >= svc - 0.02
    assert reduced.score(X_test, y_test) >= whole.score(X_test, y_test) - 0.02

    # A reduction that would keep most of the pool is not used.
    pools.clear()
    monkeypatch.setattr(rkhs_protocol, "_SERVER_KEEP", 0.05)
    FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=parts)
    assert len(pools[0][0]) == critical


def test_server_reduction_in_threads_gives_the_same_model(monkeypatch):
    # With n_jobs=2 the server's chunked duals run in the fit's threads:
    # each chunk is solved alone, so the model is the one of n_jobs=1.
    X, y = make_moons(1200, noise=0.25, random_state=0)
    X_test = make_moons(500, noise=0.25, random_state=1)[0]
    parts = np.arange(1200) % 40
    monkeypatch.setattr(rkhs_protocol, "_SERVER_ROWS", 100)
    monkeypatch.setattr(rkhs_protocol, "_LOCAL_ROWS", 60)
    threads = []
    server_map = Federation.server_map

    def spy(fed, func, items):
        def run(item):
            threads.append(threading.get_ident())
            return func(item)

        return server_map(fed, run, items)

    monkeypatch.setattr(Federation, "server_map", spy)
    one = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=parts)
    assert len(threads) > 2 and set(threads) == {threading.get_ident()}
    threads.clear()
    two = FederatedRKHSClassifier(random_state=0, n_jobs=2).fit(X, y, partitions=parts)
    assert len(threads) > 2 and threading.get_ident() not in threads
    np.testing.assert_array_equal(two.support_, one.support_)
    np.testing.assert_allclose(
        two.decision_function(X_test), one.decision_function(X_test)
    )


@pytest.mark.parametrize("server_rows", [None, 100])
def test_reduced_pool_keeps_the_refinement_certificate(monkeypatch, server_rows):
    # With ρ = 1 and rounds that stop early, every sample meets the final
    # model's constraints unless it is in the server's final pool: the
    # clients check theirs, the server its reserve, by the same rule. (On
    # these noisy moons the first models violate 170 and then 59 of the
    # samples the reduction dropped.)
    X, y = make_moons(1200, noise=0.25, random_state=0)
    pools = _spy_on_server_pools(monkeypatch)
    if server_rows is not None:
        monkeypatch.setattr(rkhs_protocol, "_SERVER_ROWS", server_rows)
    clf = FederatedRKHSClassifier(
        refinement_margin=1.0, refinement_rounds=10, random_state=0
    ).fit(X, y, partitions=np.arange(1200) % 40)
    assert clf.n_refinement_rounds_ < 10
    critical = sum(len(v) for v in clf.critical_samples_.values())
    if server_rows is not None:
        assert len(pools[0][0]) < critical
    ypm = np.where(y == clf.classes_[1], 1.0, -1.0)
    margins = ypm * clf.decision_function(X)
    sent = np.concatenate(list(clf.sent_samples_.values()))
    assert set(np.flatnonzero(margins < 1 - clf.epsilon - 1e-4)) <= set(sent)
    # Hence the refit of the model's kernels on the server's final pool is
    # the refit on every sample (Proposition 2), and the model is that refit
    # up to the server's tolerance.
    X_pool, y_pool = pools[-1]
    kw = {"beta": 1 - clf.sparsity, "epsilon": clf.epsilon, "upper": 1.0}
    kw.update(bias=True, max_iter=1, tol=1e-8)
    atoms = (clf.kernel_centers_, clf.kernel_widths_)
    Phi_pool = gaussian_atoms(X_pool, *atoms, dtype=np.float64)
    final = dense_dual(Phi_pool, np.where(y_pool == 1, 1.0, -1.0), **kw)
    Phi = gaussian_atoms(X, *atoms, dtype=np.float64)
    everything = dense_dual(Phi, ypm, **kw)
    np.testing.assert_allclose(everything["coef"], final["coef"], atol=1e-6)
    np.testing.assert_allclose(final["coef"], clf.kernel_coef_[0], atol=5e-3)


def test_server_pool_is_order_free():
    rng = np.random.RandomState(0)
    a = (rng.rand(3, 2), np.array([0.0, 1.0, 1.0]), rng.rand(3, 1))
    b = (rng.rand(2, 2), np.array([1.0, 0.0]), rng.rand(2, 1))
    X1, y1, l1, o1 = _server_pool([a, b], 1, np.float64)
    X2, y2, l2, o2 = _server_pool([b, a], 1, np.float64)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(l1, l2)
    # A row (and class) two clients hold arrives with a λ from each; the tie
    # is broken by λ, not by the order of the clients.
    c = (a[0][:1], a[1][:1], rng.rand(1, 1))
    X1, y1, l1, o1 = _server_pool([a, b, c], 1, np.float64)
    X2, y2, l2, o2 = _server_pool([c, b, a], 1, np.float64)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(l1, l2)


def test_server_reduction_never_drops_a_class(monkeypatch):
    # Chunk duals that leave every sample of a class at λ = 0 must not leave
    # the server a pool without that class: the pool is then solved whole.
    X, y, _ = rkhs_paper_data(300, seed=2)
    y_code = (y == np.unique(y)[1]).astype(np.intp)
    lam, index = np.zeros((300, 1)), np.arange(300)
    monkeypatch.setattr(rkhs_protocol, "_SERVER_ROWS", 50)
    options = {"epsilon": 0.0, "upper": 1.0, "max_iter": 1000, "tol": 1e-4}

    def critical_in(classes):
        # Five critical samples of each class in ``classes``, none other.
        def duals(X_, y_, **kw):
            out = np.zeros((len(y_), 1))
            for c in classes:
                out[np.flatnonzero(y_ == c)[:5]] = 0.1
            return out, True

        return duals

    def reduce():
        return rkhs_protocol._server_reduce(
            X, y_code, lam, index, widths=np.ones(2), n_problems=1, **options
        )

    for classes in ([0], [1], []):
        monkeypatch.setattr(rkhs_protocol, "_chunked_local_duals", critical_in(classes))
        pool, reserve = reduce()
        assert len(pool[0]) == 300 and len(reserve[0]) == 0
    monkeypatch.setattr(rkhs_protocol, "_chunked_local_duals", critical_in([0, 1]))
    pool, reserve = reduce()
    assert len(pool[0]) == 10 and len(reserve[0]) == 290
    assert set(pool[1]) == {0, 1}


def test_reduced_pool_does_not_depend_on_client_names_or_sample_order(monkeypatch):
    # The server reduces its pool in the pool's canonical order, so renaming
    # the clients or storing the samples in another order gives the same
    # model, as without the reduction.
    monkeypatch.setattr(rkhs_protocol, "_SERVER_ROWS", 100)
    pools = _spy_on_server_pools(monkeypatch)
    X, y = make_moons(1200, noise=0.25, random_state=0)
    X_test, _ = make_moons(500, noise=0.25, random_state=1)
    parts = np.arange(1200) % 40
    ref = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=parts)
    assert len(pools[0][0]) < sum(len(v) for v in ref.critical_samples_.values())
    perm = np.random.RandomState(0).permutation(1200)
    renamed = (7 * parts + 3) % 40
    other = FederatedRKHSClassifier(random_state=0).fit(
        X[perm], y[perm], partitions=renamed[perm]
    )
    np.testing.assert_allclose(
        other.decision_function(X_test), ref.decision_function(X_test), atol=1e-6
    )
    assert other.n_samples_sent_ == ref.n_samples_sent_


def test_refinement_solves_again_only_the_problems_its_samples_violate(
    monkeypatch,
):
    # Five classes of digits (two digits each), three clients: the
    # refinement rounds add a few samples near one or two of the one-vs-rest
    # boundaries. A problem whose
    # constraints y f(x) >= 1 - ε every new sample meets keeps its solution
    # (λ = 0 on the new samples keeps its refit optimal, Proposition 2)
    # instead of being solved again; before, every problem was.
    X, y = load_digits(return_X_y=True)
    X, y = StandardScaler().fit_transform(X[:800]), y[:800] % 5
    sparse_solves = []
    solve = rkhs_protocol.active_set_dual

    def counted(*args, **kwargs):
        sparse_solves.append(1)
        return solve(*args, **kwargs)

    monkeypatch.setattr(rkhs_protocol, "active_set_dual", counted)
    server_solves = []
    server_solve = rkhs_protocol._server_solve

    def spy(X_pool, y_pool, *args, **kwargs):
        model = server_solve(X_pool, y_pool, *args, **kwargs)
        server_solves.append((X_pool, y_pool, model))
        return model

    monkeypatch.setattr(rkhs_protocol, "_server_solve", spy)
    clf = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=3)
    # At least one refinement round (how many depends on the solver's
    # path, within its tolerance).
    assert len(server_solves) >= 2
    assert len(sparse_solves) < 5 * len(server_solves)
    # Every problem kept from one solve to the next is the refit of its
    # kernels on the grown pool, to the tolerance of libsvm.
    kept = 0
    for (_, _, before), (X_pool, y_pool, after) in itertools.pairwise(server_solves):
        dictionary = AtomDictionary(X_pool, X_pool, clf.widths_)
        for p, problem in enumerate(after["problems"]):
            if problem["trace"] is not before["problems"][p]["trace"]:
                continue
            kept += 1
            ypm = np.where(y_pool == p, 1.0, -1.0)
            Phi = dictionary.columns(problem["atoms"])
            refit = dense_dual(
                Phi,
                ypm,
                beta=0.3,
                epsilon=0.3,
                upper=1.0,
                bias=True,
                max_iter=1000,
                tol=1e-6,
            )
            kept_f = Phi @ problem["coef"] + problem["intercept"]
            refit_f = Phi @ refit["coef"] + refit["intercept"]
            np.testing.assert_allclose(kept_f, refit_f, atol=2e-2)
    assert kept >= 1


def _noisy_set(n, seed=0):
    # 10% of the labels flipped: most rows are critical in the clients'
    # duals, and the pool is far above _SELECTION_ROWS.
    X, y = make_classification(n + 2000, flip_y=0.1, random_state=seed)
    X = StandardScaler().fit_transform(X)
    return X[:n], y[:n], X[n:], y[n:]


def _spy_on_selections(monkeypatch):
    sizes = []
    solve = rkhs_protocol._solve_problem

    def spy(dictionary, y, *args, **kwargs):
        sizes.append((dictionary.n_centers, len(y)))
        return solve(dictionary, y, *args, **kwargs)

    monkeypatch.setattr(rkhs_protocol, "_solve_problem", spy)
    return sizes


def test_noisy_pool_selects_kernels_on_a_subsample_at_svcs_accuracy(monkeypatch):
    # The kernels are selected on at most _SELECTION_ROWS pooled samples
    # (plus a refinement round's new ones) and refitted on the whole pool:
    # a sparse model at SVC's accuracy.
    X, y, X_test, y_test = _noisy_set(3000)
    pools = _spy_on_server_pools(monkeypatch)
    selections = _spy_on_selections(monkeypatch)
    clf = FederatedRKHSClassifier(random_state=0).fit(
        X, y, partitions=np.arange(3000) % 10
    )
    cap = rkhs_protocol._SELECTION_ROWS
    assert len(pools[0][0]) > 1.5 * cap
    assert all(sizes == (cap, cap) for sizes in selections)
    svc = SVC().fit(X, y)
    assert clf.score(X_test, y_test) >= svc.score(X_test, y_test) - 0.015
    assert clf.n_kernels_ <= svc.n_support_.sum() / 5
    # The coefficients are the refit of the selected kernels on the last
    # pool the server solved (not on the subsample), to the solver's
    # tolerance.
    X_pool, y_pool = pools[-1]
    Phi = gaussian_atoms(
        X_pool, clf.kernel_centers_, clf.kernel_widths_, dtype=np.float64
    )
    kw = {"beta": 1 - clf.sparsity, "epsilon": clf.epsilon, "upper": 1.0}
    kw.update(bias=True, max_iter=1, tol=1e-8)
    refit = dense_dual(Phi, np.where(y_pool == 1, 1.0, -1.0), **kw)
    f_model = clf.decision_function(X_test)
    f_refit = (
        gaussian_atoms(
            X_test, clf.kernel_centers_, clf.kernel_widths_, dtype=np.float64
        )
        @ refit["coef"]
        + refit["intercept"]
    )
    np.testing.assert_allclose(f_model, f_refit, atol=2e-2)


def test_noisy_pool_model_does_not_depend_on_n_jobs(monkeypatch):
    # The selection subsample, the server's reduction and the refit are
    # functions of the pool's values: the clients' threads change nothing.
    monkeypatch.setattr(rkhs_protocol, "_SELECTION_ROWS", 400)
    X, y, X_test, _ = _noisy_set(1500, seed=1)
    parts = np.arange(1500) % 8
    selections = _spy_on_selections(monkeypatch)
    one = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=parts)
    two = FederatedRKHSClassifier(random_state=0, n_jobs=2).fit(X, y, partitions=parts)
    np.testing.assert_array_equal(two.kernel_centers_, one.kernel_centers_)
    np.testing.assert_array_equal(two.support_, one.support_)
    np.testing.assert_allclose(
        two.decision_function(X_test), one.decision_function(X_test), atol=1e-8
    )
    assert selections[0] == (400, 400)


def test_selection_rows_follow_the_rows_values(monkeypatch):
    monkeypatch.setattr(rkhs_protocol, "_SELECTION_ROWS", 50)
    rng = np.random.RandomState(0)
    X = rng.standard_normal((300, 3))
    np.testing.assert_array_equal(_selection_rows(X[:50]), np.arange(50))
    chosen = _selection_rows(X)
    assert len(chosen) == 50 and np.all(np.diff(chosen) > 0)
    # The same rows whatever the pool's order.
    order = rng.permutation(300)
    again = order[_selection_rows(X[order])]
    np.testing.assert_array_equal(np.sort(again), chosen)
    # Twenty rows added displace at most twenty of the chosen.
    grown = np.vstack([X, rng.standard_normal((20, 3))])
    after = _selection_rows(grown)
    assert len(after) == 50
    assert len(set(chosen) - set(after)) <= 20
    assert len(set(chosen) & set(after)) + np.sum(after >= 300) == 50


def test_selection_takes_in_a_rare_class_the_subsample_missed(monkeypatch):
    # A class of a few pooled samples that the subsample misses still has
    # its one-vs-rest problem posed with both labels: its samples join that
    # problem's selection (not the whole pool's), and the model predicts
    # the class.
    rng = np.random.RandomState(0)
    X_big, y_big = make_moons(600, noise=0.3, random_state=0)
    X = np.vstack([X_big, rng.normal([3.0, 3.0], 0.05, size=(4, 2))])
    y = np.concatenate([y_big, [2, 2, 2, 2]])
    rare = {tuple(row) for row in X[-4:]}

    def without_the_rare_class(X_pool):
        common = [i for i, row in enumerate(X_pool) if tuple(row) not in rare]
        return np.array(common[::2][:60])

    monkeypatch.setattr(rkhs_protocol, "_selection_rows", without_the_rare_class)
    pools = _spy_on_server_pools(monkeypatch)
    selections = _spy_on_selections(monkeypatch)
    clf = FederatedRKHSClassifier(refinement_rounds=0, random_state=0).fit(
        X, y, partitions=np.arange(len(y)) % 3
    )
    n_rare = int(np.sum(pools[0][1] == 2))
    assert n_rare >= 1 and len(pools[0][1]) > 60 + n_rare
    assert [size for _, size in selections] == [60, 60, 60 + n_rare]
    assert np.all(clf.predict(rng.normal([3.0, 3.0], 0.05, size=(5, 2))) == 2)
