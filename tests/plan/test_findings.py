from lab.plan.findings import custom_resources

STORAGE, CLUSTER = "azure-native:storage:", "azure-native:containerservice:"


def test_custom_resources_are_a_providers_of_the_prefixes(broken_plan):
    storage, cluster = custom_resources(broken_plan, STORAGE), custom_resources(broken_plan, CLUSTER)
    assert storage and cluster and all(r.type.startswith(STORAGE) for r in storage)
    assert custom_resources(broken_plan, (STORAGE, CLUSTER)) == [
        r for r in broken_plan.resources if r in storage or r in cluster
    ]
    storage[0].custom = False  # a component's resource: not one a provider creates
    assert storage[0] not in custom_resources(broken_plan, STORAGE)
