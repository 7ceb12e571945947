"""`elastic-lab plan`: the Pulumi program, run offline under mocks, recorded and checked.

Library API (for tests and for other components' checks):

    from lab.plan.harness import run_program, list_stacks, Plan, RecordedResource
    plan = run_program("aks-dev", {"gpuMaxNodes": 5})   # overrides: short or full keys; None unsets
    plan = run_program("aks-dev", program=fn)           # run `fn` instead of __main__.py

    plan.resources            # [RecordedResource] in registration order
    plan.of_type(token, ...)  # resources of these type tokens
    plan.with_prefix("kubernetes:")
    plan.one(token, name)     # exactly one, or LookupError
    plan.children(urn), plan.by_urn(urn)
    plan.outputs, plan.secret_outputs, plan.invokes, plan.config, plan.cloud

    r = plan.one("azure-native:containerservice:AgentPool", "aks-gpu-spot")
    r.type, r.name, r.urn, r.parent (URN), r.parent_name, r.custom, r.remote
    r.inputs                  # wire names (camelCase), secrets unwrapped, resource refs {"$ref": urn}
    r.secret_inputs           # dotted paths of inputs that were secret
    r.ignore_changes, r.depends_on (explicit), r.dependencies (all), r.property_dependencies,
    r.provider, r.protect, r.delete_before_replace, r.retain_on_delete, r.replace_on_changes
    r.state                   # mocked outputs (lab/plan/mocks.py); r.outputs / r.secret_outputs
                              # for components (register_outputs)

    Remote components (helm v4 Chart, kustomize v2 Directory) and providers arrive as one
    resource each, with their inputs (chart, version, values / directory / kubeconfig).
    A program error (e.g. components.config.ConfigError) propagates, carrying the
    resources recorded before it as `exc.recorded_resources`.

Checks (lab/plan/checks.py):

    from lab.plan.checks import Finding, register_check, run_checks, findings_of, errors

    @register_check("k8s:my-check", applies=lambda plan: bool(plan.with_prefix("kubernetes:")))
    def my_check(plan):
        yield Finding.error("k8s:my-check", resource, "spec.x", value, "what was expected")

    Modules named lab/plan/check_*.py are imported (and so registered) automatically;
    others go in checks.CHECK_MODULES. `run_checks(plan, only=None)` returns one CheckRun
    (name, applied, findings) per check (UnknownCheck, listing the known ones, if `only`
    names an unregistered check); `elastic-lab plan` exits 1 on any error finding, 2 on an
    unknown `--check`.

Built-in checks: arm-conformance (lab/plan/arm.py) and guardrail:* (lab/plan/guardrails.py).
Cost estimate: lab/plan/cost.py with the dated price table lab/plan/prices.yaml.
"""
