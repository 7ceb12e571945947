"""A catalogue of bad inputs to `elastic-lab plan`, one per category: each is refused with exit
2 before anything is planned, with one message naming the input, the bad value and what is
expected, and never a traceback."""

from __future__ import annotations

import pytest

from lab.cli import main
from lab.program.harness import run_program
from lab.vocab.problems import InvalidInput


@pytest.fixture
def stack_file(tmp_path):
    """A stack file with the given bytes, in a project root of its own (the project's
    stacks/ is shared by every test)."""

    def make(name: str, content: bytes) -> str:
        (tmp_path / "stacks").mkdir(exist_ok=True)
        (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_bytes(content)
        return name

    make.root = tmp_path  # type: ignore[attr-defined]
    return make


@pytest.fixture
def prices(tmp_path):
    def make(content: bytes) -> str:
        path = tmp_path / "prices.yaml"
        path.write_bytes(content)
        return str(path)

    return make


def _refused(capsys, argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    return err


# (stack file's bytes, what the message says)
STACK_FILES = {
    "a-scalar": (b"just a line of text\n", "a YAML mapping at the top level, not a str"),
    "a-list": (b"- config\n", "a YAML mapping at the top level, not a list"),
    "not-yaml": (b"config: [unclosed\n", "expected YAML (expected ',' or ']', but got '<stream end>' at line 2"),
    "binary": (b"\x00\x01\x02binary", "expected YAML (special characters are not allowed at character 0)"),
    "not-utf8": (b"config:\n  a: \xff\xfe\n", "expected UTF-8 text (invalid start byte at byte"),
    "config-not-a-mapping": (b"config: 3\n", "`config:` as a mapping"),
}


@pytest.mark.parametrize("case", STACK_FILES)
def test_a_malformed_stack_file_is_refused(stack_file, case):
    content, said = STACK_FILES[case]
    name = stack_file(f"bad-{case}", content)
    with pytest.raises(InvalidInput) as refused:
        run_program(name, root=stack_file.root)
    assert refused.value.exit_code == 2
    err = str(refused.value)
    assert f"stack {name!r}=" in err and f"Pulumi.{name}.yaml" in err and said in err


PRICE_FILES = {
    "not-yaml": (b"currency: [\n", "expected YAML"),
    "a-scalar": (b"cheap\n", "a YAML mapping at the top level, not a str"),
    "keys-missing": (b"currency: USD\n", "the keys ['as_of', 'azure'] too"),
}


@pytest.mark.parametrize("case", PRICE_FILES)
def test_a_malformed_price_table_is_refused(capsys, prices, case):
    content, said = PRICE_FILES[case]
    err = _refused(capsys, ["plan", "--stack", "aks-dev", "--prices", prices(content)])
    assert err.startswith("elastic-lab plan: --prices=") and said in err


def test_a_missing_price_table_is_refused(capsys, tmp_path):
    err = _refused(capsys, ["plan", "--stack", "aks-dev", "--prices", str(tmp_path / "none.yaml")])
    assert "expected an existing file: a price table laid out as lab/plan/prices.yaml" in err


# (stack, config override, what the message says)
CONFIG_VALUES = {
    "aws-region-that-does-not-exist": (
        "eks-dev",
        "elastic-spot-lab:region=us-mars-1",
        "elastic-spot-lab:region='us-mars-1' is invalid: expected a region where EKS runs (botocore",
    ),
    "ec2-gpu-type-that-does-not-exist": (
        "eks-dev",
        'elastic-spot-lab:gpuInstanceTypes=["g6.mega"]',
        "elastic-spot-lab:gpuInstanceTypes='g6.mega' is invalid: expected EC2 instance types (botocore",
    ),
    "ec2-cpu-type-that-does-not-exist": (
        "eks-dev",
        "elastic-spot-lab:cpuInstanceType=m6i.mega",
        "elastic-spot-lab:cpuInstanceType='m6i.mega' is invalid: expected an EC2 instance type (botocore",
    ),
    "azure-region-that-does-not-exist": (
        "aks-dev",
        "elastic-spot-lab:location=marsnorth",
        "elastic-spot-lab:location='marsnorth' is invalid: expected an Azure region (`az account list-locations",
    ),
    "azure-region-misspelt": (
        "aks-dev",
        "elastic-spot-lab:location=westeurop",
        "did you mean 'westeurope'?",
    ),
    "azure-gpu-size-that-does-not-exist": (
        "aks-dev",
        "elastic-spot-lab:gpuVmSize=Standard_NC999_fake",
        "elastic-spot-lab:gpuVmSize='Standard_NC999_fake' is invalid: expected an NVIDIA GPU size Azure offers",
    ),
    "aks-kubernetes-from-the-future": (
        "aks-dev",
        "elastic-spot-lab:kubernetesVersion=1.99",
        "elastic-spot-lab:kubernetesVersion='1.99' is invalid: expected 1.29 to 1.37",
    ),
    "trainer-image-unpinned": (
        "aks-dev",
        "elastic-spot-lab:trainerImage=eslacr636ed551d34ae649.azurecr.io/elastic-spot-lab/trainer",
        "elastic-spot-lab:trainerImage='eslacr636ed551d34ae649.azurecr.io/elastic-spot-lab/trainer' is invalid: "
        "expected a pinned container image reference",
    ),
    "eks-kubernetes-from-the-future": (
        "eks-dev",
        "elastic-spot-lab:kubernetesVersion=1.99",
        "elastic-spot-lab:kubernetesVersion='1.99' is invalid: expected 1.30 to 1.37",
    ),
    "a-spot-price-of-infinity": (
        "aks-dev",
        "elastic-spot-lab:gpuSpotMaxPrice=inf",
        "elastic-spot-lab:gpuSpotMaxPrice='inf' is invalid: expected a finite number",
    ),
}


@pytest.mark.parametrize("case", CONFIG_VALUES)
def test_a_value_no_cloud_would_take_is_refused(capsys, case):
    stack, override, said = CONFIG_VALUES[case]
    err = _refused(capsys, ["plan", "--stack", stack, "--set", override])
    assert said in err


def test_the_newest_kubernetes_minor_is_the_newest_schema_carried():
    from kubernetes_validate import utils

    from lab.vocab.versions import NEWEST_KUBERNETES_MINOR

    assert utils.major_minor(utils.latest_version()) == f"1.{NEWEST_KUBERNETES_MINOR}"


def test_every_eks_region_botocore_lists_is_accepted():
    from components.eks.catalogue import eks_regions

    assert {"us-east-1", "eu-west-2", "us-gov-west-1", "cn-north-1"} <= eks_regions()


def test_a_region_the_price_table_lacks_is_a_warning_that_counts(capsys):
    code = main(["plan", "--stack", "aks-dev", "--set", "elastic-spot-lab:location=westeurope"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert (
        "WARNING [cost:priced] azure-native:containerservice:ManagedCluster 'aks': price=\"no prices for region " in out
    )
    assert "0 error(s), 1 warning(s)" in out


def test_the_price_check_reads_the_table_given(capsys, tmp_path):
    """`--prices` is the table the cost and its check both read: a region it prices is no warning."""
    import yaml

    from lab.plan.cost import PRICES

    table = yaml.safe_load(PRICES.read_text())
    table["azure"]["vm"]["westeurope"] = table["azure"]["vm"]["eastus"]
    (tmp_path / "prices.yaml").write_text(yaml.safe_dump(table))
    argv = ["plan", "--stack", "aks-dev", "--set", "elastic-spot-lab:location=westeurope"]
    assert main([*argv, "--prices", str(tmp_path / "prices.yaml")]) == 0
    out, _ = capsys.readouterr()
    assert "WARNING [cost:priced]" not in out and "0 error(s), 1 warning(s)" in out  # the trainer image's alone


# (stack, config override, the one problem said): a bad value is said once, under the key set.
ONE_PROBLEM = {
    "aks-version": ("aks-dev", "kubernetesVersion=abc", "elastic-spot-lab:kubernetesVersion='abc' is invalid"),
    "eks-version": ("eks-dev", "kubernetesVersion=abc", "elastic-spot-lab:kubernetesVersion='abc' is invalid"),
    "byo-version": ("byo", "kubernetesVersion=abc", "elastic-spot-lab:kubernetesVersion='abc' is invalid"),
    "system-pool-named-as-the-gpu-pool": (
        "aks-dev",
        "systemPoolName=gpuspot",
        "elastic-spot-lab:systemPoolName='gpuspot' is invalid: expected pool names that differ from each other: "
        "systemPoolName='gpuspot', cpuPoolName='cpu', gpuPoolName='gpuspot'",
    ),
    "cpu-pool-named-as-the-system-pool": (
        "aks-dev",
        "cpuPoolName=system",
        "elastic-spot-lab:cpuPoolName='system' is invalid: expected pool names that differ",
    ),
}


@pytest.mark.parametrize("case", ONE_PROBLEM)
def test_one_bad_value_is_one_problem_under_the_key_that_was_set(capsys, case):
    stack, override, said = ONE_PROBLEM[case]
    err = _refused(capsys, ["plan", "--stack", stack, "--set", override])
    assert "(1 problem(s))" in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("  - ")]
    assert line.startswith(f"  - {said}")


def test_a_stack_and_all_stacks_together_are_refused(capsys):
    err = _refused(capsys, ["plan", "-s", "aks-dev", "--all-stacks"])
    assert err == "elastic-lab plan: -s aks-dev and --all-stacks: give one (--all-stacks plans every stack)\n"


def test_a_current_stack_with_no_file_is_named_with_where_it_was_chosen(capsys, monkeypatch):
    monkeypatch.setenv("ELASTIC_LAB_STACK", "aks-dve")
    err = _refused(capsys, ["plan"])
    assert err.startswith("elastic-lab plan: stack 'aks-dve' (from $ELASTIC_LAB_STACK) has no config file")
    assert "did you mean 'aks-dev'?" in err


def test_a_folder_or_a_dangling_link_is_no_stack(stack_file):
    from lab.program.stack_files import StackNotFound, list_stacks
    from lab.program.stack_files import stack_file as find

    root = stack_file.root
    stack_file("aks-dev", b"config: {}\n")
    (root / "stacks" / "Pulumi.a-folder.yaml").mkdir()
    (root / "stacks" / "Pulumi.gone.yaml").symlink_to(root / "nowhere.yaml")
    assert list_stacks(root) == ["aks-dev"]
    with pytest.raises(StackNotFound, match=r"Pulumi\.a-folder\.yaml is a folder, not a stack file"):
        find("a-folder", root)
    with pytest.raises(StackNotFound, match=r"Pulumi\.gone\.yaml is a link to .*nowhere\.yaml, which does not exist"):
        find("gone", root)
    with pytest.raises(StackNotFound, match=r"\(stacks here: aks-dev; did you mean 'aks-dev'\?\)"):
        find("aks-deev", root)
