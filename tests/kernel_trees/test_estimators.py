import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs, make_circles
from sklearn.metrics import adjusted_rand_score
from sklearn.utils.estimator_checks import parametrize_with_checks

import iclr24.kernel_trees.kmeans as kmeans_module
from iclr24.kernel_trees import (
    IMM,
    KernelExKMC,
    KernelExpand,
    KernelIMM,
    KernelKMeans,
    best_interval_split,
    build_features,
    imm_tree,
    kernel_kmeans_cost,
)


@pytest.fixture
def blobs():
    X, y = make_blobs(90, centers=[[0, 0], [6, 0], [3, 6]], cluster_std=0.6, random_state=0)
    return X, y


@pytest.fixture
def circles():
    return make_circles(200, factor=0.4, noise=0.04, random_state=0)


# --- kernel k-means -----------------------------------------------------------------------------


def test_kernel_cost_equals_explicit_feature_cost_for_a_linear_kernel(blobs):
    X, y = blobs
    explicit = sum(((X[y == c] - X[y == c].mean(0)) ** 2).sum() for c in np.unique(y))
    assert kernel_kmeans_cost(X @ X.T, y) == pytest.approx(explicit)


def test_linear_kernel_kmeans_is_kmeans(blobs):
    X, _ = blobs
    kkm = KernelKMeans(3, kernel="linear", random_state=0).fit(X)
    km = KMeans(3, n_init=10, random_state=0).fit(X)
    assert adjusted_rand_score(km.labels_, kkm.labels_) == 1.0
    assert kkm.cost_ == pytest.approx(km.inertia_)


def test_rbf_kernel_kmeans_separates_rings_and_predicts_its_own_labels(circles):
    X, y = circles
    kkm = KernelKMeans(2, gamma=5.0, random_state=0).fit(X)
    assert adjusted_rand_score(y, kkm.labels_) == 1.0
    np.testing.assert_array_equal(kkm.predict(X), kkm.labels_)
    assert kkm.cost_ == pytest.approx(kernel_kmeans_cost(np.exp(-5.0 * ((X[:, None] - X[None]) ** 2).sum(-1)),
                                                         kkm.labels_))


def test_random_state_makes_fits_identical(circles):
    X, _ = circles
    a = KernelKMeans(3, gamma=2.0, init="random", n_init=3, random_state=4).fit(X)
    b = KernelKMeans(3, gamma=2.0, init="random", n_init=3, random_state=4).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)


# --- IMM and the interval split ----------------------------------------------------------------------------


def test_imm_hand_checked_case():
    X = np.array([[0, 0], [1, 0], [0, 1], [10, 10], [11, 10], [3, 9]], dtype=float)
    labels = np.array([0, 0, 0, 1, 1, 0])
    # centres (1, 2.5) and (10.5, 10): x0 > 6.5 and x1 > 9.5 both make no mistake; x0 comes first
    tree, mistakes = imm_tree(X, labels, build_features("raw", X, "linear", 1.0))
    assert mistakes == 0
    assert tree.export_text(decimals=2) == (
        "|--- x0 in (6.50, inf)\n|   |--- cluster 1\n|--- x0 not in (6.50, inf)\n|   |--- cluster 0\n")
    # move the stray point so every cut on x0 and x1 separates it from its centre
    X[5] = [12, 12]
    tree, mistakes = imm_tree(X, labels, build_features("raw", X, "linear", 1.0))
    assert mistakes == 1


def test_imm_on_three_separated_groups_cuts_between_them():
    X = np.array([[0.0], [1.0], [10.0], [11.0], [20.0], [21.0]])
    tree, mistakes = imm_tree(X, np.array([0, 0, 1, 1, 2, 2]), build_features("raw", X, "linear", 1.0))
    assert mistakes == 0 and tree.n_leaves == 3
    np.testing.assert_array_equal(tree.predict(X), [0, 0, 1, 1, 2, 2])
    cuts = sorted(node.intervals[0][0] for node in tree.nodes if not node.is_leaf)
    assert cuts == [5.5, 15.5]


def test_imm_thresholds_include_the_gap_next_to_a_centre():
    # centres 1 (cluster 0: 0, 2) and 5 (cluster 1: 1.5, 8.5). Between the point 1.5 and the centre 1, t = 1.25
    # makes one mistake (the point 2). The authors' notebook only tries midpoints of consecutive point values
    # strictly between the centres (here 1.75: two mistakes); IMM's minimum over all thresholds is 1.
    X = np.array([[0.0], [2.0], [1.5], [8.5]])
    tree, mistakes = imm_tree(X, np.array([0, 0, 1, 1]), build_features("raw", X, "linear", 1.0))
    assert mistakes == 1 and tree.nodes[0].threshold == 1.25


def test_kernel_matrix_features_follow_the_data_order_and_drop_repeats():
    X = np.array([[0.3, 5.0], [-1.0, 5.0], [0.3, 4.0], [2.0, 6.0]])
    features = build_features("kernel_matrix", X, "rbf", 1.0)
    np.testing.assert_array_equal(features.coordinates, [0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(features.params, [0.3, -1.0, 2.0, 5.0, 4.0, 6.0])


def test_kernel_imm_on_circles_equals_the_authors_notebook():
    """The authors' notebook (kernelmatrix_imm, check_all_cuts=True), run on the same kernel k-means labels
    (issue #51): its root cut is the kernel column of point 24 on x1 and its price 1.0370. Its columns are the
    training points in data order and IMM keeps the first of equal-mistake cuts, so the order of the features
    decides the tree: with anchors in sorted order the cut was another point's (price 1.0375, ARI 0.973)."""
    X, _ = make_circles(300, factor=0.4, noise=0.04, random_state=0)
    gamma = 3.0 / (X.shape[1] * X.var())  # the experiment's choice on seed 0 (5.146)
    kkm = KernelKMeans(2, gamma=gamma, random_state=0).fit(X)
    tree = KernelIMM(2, gamma=gamma, features="kernel_matrix", kernel_kmeans=kkm).fit(X)
    root = tree.tree_.nodes[0]
    assert root.coordinate == 1 and tree.features_.params[root.feature] == X[24, 1]
    assert tree.mistakes_ == 45
    assert tree.price_ == pytest.approx(1.0370, abs=5e-5)


def test_best_interval_split_hand_checked():
    x = np.array([[0.0], [1.0], [2.0], [10.0], [11.0], [12.0]])
    mistakes = 1.0 - np.eye(2)[[0, 0, 0, 1, 1, 1]]
    gain, coordinate, (lo, hi), inside, outside = best_interval_split(x, mistakes)
    assert (gain, coordinate, lo, hi, inside, outside) == (3.0, 0, -np.inf, 6.0, 0, 1)
    # a middle group needs an interval, not a threshold
    x = np.array([[0.0], [1.0], [5.0], [6.0], [10.0], [11.0]])
    gain, _, (lo, hi), inside, outside = best_interval_split(x, 1.0 - np.eye(2)[[0, 0, 1, 1, 0, 0]])
    assert (gain, lo, hi, inside, outside) == (2.0, 3.0, 8.0, 1, 0)


def test_interval_split_never_separates_equal_values():
    x = np.array([[1.0], [1.0], [1.0], [2.0]])
    gain, _, (lo, hi), *_ = best_interval_split(x, 1.0 - np.eye(2)[[0, 1, 0, 1]])
    assert lo == 1.5 or hi == 1.5


# --- the kernel trees ------------------------------------------------------------------------------------------


def test_kernel_imm_with_linear_kernel_and_raw_features_is_imm(blobs):
    X, _ = blobs
    km = KMeans(3, n_init=10, random_state=0).fit(X)
    kkm = KernelKMeans(3, kernel="linear", random_state=0).fit(X)
    assert adjusted_rand_score(km.labels_, kkm.labels_) == 1.0
    imm = IMM(3, kmeans=km).fit(X)
    kimm = KernelIMM(3, kernel="linear", features="raw", kernel_kmeans=kkm).fit(X)
    structure = lambda tree: [(n.coordinate, n.intervals) for n in tree.nodes]  # noqa: E731
    assert structure(imm.tree_) == structure(kimm.tree_)
    assert adjusted_rand_score(imm.labels_, kimm.labels_) == 1.0
    assert imm.price_ == pytest.approx(kimm.price_)


@pytest.mark.parametrize("kernel, features", [("rbf", "kernel_matrix"), ("laplace", "kernel_matrix"),
                                              ("rbf", "taylor")])
def test_interval_routing_equals_surrogate_routing(circles, kernel, features):
    X, _ = circles
    tree = KernelIMM(3, kernel=kernel, gamma=2.0, features=features, random_state=0).fit(X)
    np.testing.assert_array_equal(tree.tree_.apply(X), tree.tree_.apply_surrogate(X, tree.features_.transform(X)))
    if features == "kernel_matrix":
        assert all(len(n.intervals) == 1 for n in tree.tree_.nodes if not n.is_leaf)


@pytest.mark.parametrize("Tree", [KernelExKMC, KernelExpand])
def test_refined_trees_recover_kernel_kmeans_on_rings(circles, Tree):
    X, _ = circles
    kkm = KernelKMeans(2, gamma=5.0, random_state=0).fit(X)
    kimm = KernelIMM(2, gamma=5.0, kernel_kmeans=kkm).fit(X)
    tree = Tree(2, gamma=5.0, kernel_kmeans=kkm, max_leaves=4).fit(X)
    assert 2 <= tree.tree_.n_leaves <= 4
    assert (tree.labels_ == kkm.labels_).mean() >= 0.95
    assert 1.0 - 1e-9 <= tree.price_ <= kimm.price_ + 1e-9
    assert "cluster" in tree.export_text()


def test_taylor_features_sum_to_the_gaussian_kernel_wherever_the_data_lie():
    """sum_j phi_j(x) phi_j(y) = exp(-g (x - y)^2) per coordinate: the coefficient sqrt((2g)^j / j!) and the
    factor exp(-g u^2) are both needed, and centring makes it hold far from 0."""
    rng = np.random.RandomState(0)
    for loc in (0.0, 100.0):
        X = loc + rng.randn(30, 2)
        features = build_features("taylor", X, "rbf", gamma=0.7, taylor_degree=40)
        Phi = features.transform(X)
        K = np.ones((30, 30))
        for i in range(2):
            cols = features.coordinates == i
            K *= Phi[:, cols] @ Phi[:, cols].T
        np.testing.assert_allclose(K, np.exp(-0.7 * ((X[:, None] - X[None]) ** 2).sum(-1)), rtol=1e-9, atol=1e-12)
    # one feature by hand: degree 2 at u = x - mean = 0.5, gamma 0.7: sqrt(1.4^2 / 2) 0.25 exp(-0.175)
    X = np.array([[0.0], [1.0]])
    f = build_features("taylor", X, "rbf", gamma=0.7, taylor_degree=2)
    assert f.transform(np.array([[1.0]]))[0, 2] == pytest.approx(np.sqrt(1.4**2 / 2) * 0.25 * np.exp(-0.175))


def test_taylor_trees_are_translation_invariant(circles):
    X, _ = circles
    near = KernelIMM(2, gamma=5.0, features="taylor", random_state=0).fit(X)
    far = KernelIMM(2, gamma=5.0, features="taylor", random_state=0).fit(X + 100.0)
    np.testing.assert_array_equal(near.labels_, far.labels_)
    assert near.price_ == pytest.approx(far.price_)


def test_exkmc_point_cost_is_the_squared_distance_to_the_cluster_mean_in_feature_space(blobs):
    """cost(i -> C) = K_ii - 2 mean_j K_ij + mean K_CC = ||x_i - mu_C||^2 for the linear kernel."""
    X, y = blobs
    w = KernelExKMC(3, kernel="linear", features="raw")._point_costs(X @ X.T, y)
    brute = np.stack([((X - X[y == c].mean(0)) ** 2).sum(1) for c in range(3)], axis=1)
    np.testing.assert_allclose(w, brute, atol=1e-9)
    mistakes = KernelExpand(3)._point_costs(X @ X.T, y)
    np.testing.assert_array_equal(mistakes, (y[:, None] != np.arange(3)[None]).astype(float))


@pytest.mark.parametrize("Tree", [KernelExKMC, KernelExpand])
def test_every_leaf_takes_its_cheapest_cluster(Tree):
    X, _ = make_blobs(240, centers=4, cluster_std=2.5, random_state=3)
    tree = Tree(4, gamma=0.05, max_leaves=7, random_state=0).fit(X)
    K = kmeans_module.pairwise_kernel(X, X, "rbf", 0.05)
    w = tree._point_costs(K, tree.kernel_kmeans_.labels_)
    leaf_of = tree.tree_.apply(X)
    for leaf in tree.tree_.leaves:
        rows = leaf_of == leaf
        if rows.any():
            costs = w[rows].sum(0)
            assert costs[tree.tree_.nodes[leaf].label] == pytest.approx(costs.min()), leaf


@pytest.mark.parametrize("Tree", [KernelExKMC, KernelExpand])
def test_refinement_relabels_the_imm_leaves_before_cutting(Tree, blobs):
    """Kernel IMM's leaves keep the label of the centre they hold; the refined trees first give every
    leaf its cheapest cluster. Corrupt the labels and refine with no cut to make: they come back."""
    X, _ = blobs
    tree = Tree(3, gamma=0.1, max_leaves=3, random_state=0).fit(X)
    leaves = tree.tree_.leaves
    fitted = [tree.tree_.nodes[leaf].label for leaf in leaves]
    for leaf, label in zip(leaves, np.roll(fitted, 1)):
        tree.tree_.nodes[leaf].label = int(label)
    K = kmeans_module.pairwise_kernel(X, X, "rbf", 0.1)
    tree._refine(X, K, tree.kernel_kmeans_.labels_)
    assert [tree.tree_.nodes[leaf].label for leaf in leaves] == fitted


def test_plot_partition_draws_two_dimensional_data(circles):
    import matplotlib.pyplot as plt

    X, _ = circles
    ax = KernelExKMC(2, gamma=5.0, max_leaves=3, random_state=0).fit(X).plot_partition(X)
    assert ax.get_title().startswith("KernelExKMC")
    plt.close("all")
    with pytest.raises(ValueError, match="draws 2-D data, got X with 3 features"):
        KernelIMM(2, random_state=0).fit(np.c_[X, X[:, :1]]).plot_partition(np.c_[X, X[:, :1]])


# --- errors -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("Estimator", [KernelKMeans, IMM, KernelIMM, KernelExKMC])
def test_more_clusters_than_samples(Estimator):
    with pytest.raises(ValueError, match="n_samples=3 should be >= n_clusters=4"):
        Estimator(4).fit(np.eye(3))


def test_non_finite_input_is_refused():
    X = np.eye(5)
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        KernelIMM(2).fit(X)


def test_unknown_kernel_and_features_are_refused():
    with pytest.raises(ValueError, match="'kernel' parameter of KernelKMeans must be"):
        KernelKMeans(2, kernel="cosine").fit(np.eye(4))
    with pytest.raises(ValueError, match="'features' parameter of KernelIMM must be"):
        KernelIMM(2, features="spline").fit(np.eye(4))
    with pytest.raises(ValueError, match="features='kernel_matrix' needs a product kernel"):
        KernelIMM(2, kernel="linear").fit(np.eye(4))


def test_max_leaves_below_n_clusters_is_refused(circles):
    X, _ = circles
    with pytest.raises(ValueError, match="max_leaves=2 must be >= n_clusters=3"):
        KernelExKMC(3, max_leaves=2, random_state=0).fit(X)


def test_kernel_matrix_size_is_capped(monkeypatch):
    monkeypatch.setattr(kmeans_module, "KERNEL_MAX_SAMPLES", 10)
    with pytest.raises(ValueError, match="n_samples=11 exceeds KERNEL_MAX_SAMPLES=10"):
        KernelKMeans(2).fit(np.random.RandomState(0).rand(11, 2))


def test_given_clustering_must_match(circles):
    X, _ = circles
    kkm = KernelKMeans(2, gamma=5.0, random_state=0).fit(X[:50])
    with pytest.raises(ValueError, match="was fitted on 50 samples"):
        KernelIMM(2, gamma=5.0, kernel_kmeans=kkm).fit(X)
    kkm = KernelKMeans(2, gamma=5.0, random_state=0).fit(X)
    with pytest.raises(ValueError, match="fitted with gamma=5, this tree uses gamma=2; give both the same gamma"):
        KernelIMM(2, gamma=2.0, kernel_kmeans=kkm).fit(X)
    with pytest.raises(ValueError, match="fitted with kernel='rbf', this tree uses kernel='laplace'"):
        KernelExKMC(2, kernel="laplace", gamma=5.0, kernel_kmeans=kkm).fit(X)
    default = KernelKMeans(2, random_state=0).fit(X)  # gamma=None is 1 / n_features = 0.5 on both sides
    KernelIMM(2, gamma=0.5, kernel_kmeans=default).fit(X)


# --- scikit-learn's estimator checks --------------------------------------------------------------------------------


@parametrize_with_checks([KernelKMeans(n_clusters=2, n_init=2), IMM(n_clusters=2),
                          KernelIMM(n_clusters=2), KernelIMM(n_clusters=2, features="taylor"),
                          KernelExKMC(n_clusters=2, max_leaves=3), KernelExpand(n_clusters=2, max_leaves=3)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# --- Hartigan refinement ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_hartigan_never_ends_above_lloyd_from_the_same_seeds(seed):
    X = np.random.RandomState(seed).randn(60, 2)
    lloyd = KernelKMeans(3, gamma=1.0, algorithm="lloyd", n_init=3, random_state=seed).fit(X)
    hartigan = KernelKMeans(3, gamma=1.0, algorithm="hartigan", n_init=3, random_state=seed).fit(X)
    assert hartigan.cost_ <= lloyd.cost_ + 1e-9


@pytest.mark.parametrize("seed", range(3))
def test_hartigan_reaches_the_brute_force_optimum_on_tiny_data(seed):
    import itertools

    X = np.random.RandomState(seed).randn(8, 2)
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    best = min(kernel_kmeans_cost(K, np.array((0,) + p)) for p in itertools.product(range(3), repeat=7)
               if len(set((0,) + p)) == 3)
    assert KernelKMeans(3, gamma=1.0, random_state=seed).fit(X).cost_ == pytest.approx(best)
