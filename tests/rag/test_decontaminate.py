"""Decontamination: records that are a problem (same code, same name, or nearly the same program) never reach the
index, and a problem's own solution never comes back from a query."""

from __future__ import annotations

from rag.build import build_index
from rag.decontaminate import ProblemRef, decontaminate
from rag.retriever import IndexRetriever

from tests.rag.conftest import problem_file


def _problems(data_dir, *stems):
    return [ProblemRef(*problem_file(data_dir, stem)[:1], stem, problem_file(data_dir, stem)[1]) for stem in stems]


def test_each_reason_is_counted(corpus, data_dir, embedder):
    problems = _problems(data_dir, "relu_problem", "gelu_variant")
    problems.append(ProblemRef("kernelbench/level1/88_MinGPTNewGelu", "MinGPTNewGelu", "class Model: pass\n"))
    keep, report = decontaminate(corpus, problems, embedder=embedder)
    dropped = {corpus[i].name for i in set(range(len(corpus))) - set(keep)}
    # ReLU and its reformatted copy share the problem's normalised code; the Sakana 88_MinGPTNewGelu shares a name;
    # GELU is the gelu_variant problem with another name and argument; 19_ReLU differs only in sizes.
    assert {"ReLU", "ReLU_copy"} <= dropped and "88_MinGPTNewGelu" in dropped and "GELU" in dropped
    assert report.dropped["code_match"] == 2
    assert report.dropped["name_match"] == 1
    assert report.dropped["similarity"] >= 2  # GELU, 19_ReLU
    assert report.total_dropped == len(corpus) - len(keep)
    # Different ops survive.
    assert {"RowSoftmax", "SoftmaxCUDA", "LayerNorm", "MatMul"} <= {corpus[i].name for i in keep}
    assert {e["reason"] for e in report.to_dict()["examples"]} == {"code_match", "name_match", "similarity"}


def test_without_an_embedder_only_code_and_names_count(corpus, data_dir):
    keep, report = decontaminate(corpus, _problems(data_dir, "gelu_variant"))
    assert report.total_dropped == 0 and len(keep) == len(corpus)


def test_similarity_threshold_can_be_switched_off(corpus, data_dir, embedder):
    _, report = decontaminate(corpus, _problems(data_dir, "gelu_variant"), embedder=embedder,
                              similarity_threshold=None)
    assert report.total_dropped == 0


def test_a_problems_own_solution_never_comes_back(tmp_path, corpus, data_dir, embedder):
    problem_id, source = problem_file(data_dir, "relu_problem")
    out = tmp_path / "index"
    report = build_index(corpus, out, embedder=embedder, problems=_problems(data_dir, "relu_problem"))
    assert report["decontamination"]["total_dropped"] >= 2
    retriever = IndexRetriever(out, embedder=embedder)
    everything = retriever.examples(source, problem_id, None, k=100)
    assert everything, "the index still serves other examples"
    names = {e["name"] for e in everything}
    assert not names & {"ReLU", "ReLU_copy", "19_ReLU"}
    retriever.close()


def test_query_time_exclusion_without_decontamination(built_index, data_dir, embedder):
    """Even an index built without decontamination never returns the problem's own program."""
    problem_id, source = problem_file(data_dir, "relu_problem")
    retriever = IndexRetriever(built_index, embedder=embedder)
    for example in retriever.examples(source, problem_id, None, k=100):
        assert example["name"] not in ("ReLU", "ReLU_copy")
    retriever.close()


def test_a_harvested_solution_is_excluded_by_problem_id(tmp_path, built_index, data_dir, embedder):
    """A run's kernel for a problem is never shown for that problem, even when the problem file changed since."""
    import shutil

    from rag.corpus import Record

    out = tmp_path / "index"
    shutil.copytree(built_index, out)
    problem_id, source = problem_file(data_dir, "online_softmax")
    mine = Record(id="runs/r/s1/g0.0/t0", source="runs", backend="triton", name="online_softmax",
                  pytorch_code=source.replace("FEATURES = 1000", "FEATURES = 2000"), problem_id=problem_id,
                  kernel_code="import triton\n# the run's own softmax solution\n" + "x = 1\n" * 10)
    build_index([mine], out, append=True, embedder=embedder)
    retriever = IndexRetriever(out, embedder=embedder)
    ids = [e["id"] for e in retriever.examples(source, problem_id, "triton", k=50)]
    assert ids and "runs/r/s1/g0.0/t0" not in ids
    # Another problem may see it.
    other_id, other_source = problem_file(data_dir, "gelu_variant")
    assert "runs/r/s1/g0.0/t0" in [e["id"] for e in retriever.examples(other_source, other_id, "triton", k=50)]
    retriever.close()
