from lab.plan import display


def test_views_left_without_options_show_the_defaults(aks_plan):
    defaults = display.SHOWN_DEFAULTS
    assert defaults == {"show_secrets": False, "api": None, "save_cost_s": 1.0, "band": None, "trace": None}
    assert display.text(aks_plan, [], None) == display.text(aks_plan, [], None, **defaults)
    shown = display.json_dict(aks_plan, [], None)
    assert shown == display.json_dict(aks_plan, [], None, **defaults)
    assert shown["evictions"] == {"save_cost_s": 1.0, "rows": []} and shown["arm_api_versions"] is None


def test_an_option_given_is_shown_over_its_default(aks_plan):
    shown = display.json_dict(aks_plan, [], None, save_cost_s=2.5, api={"t": {"model": "m"}})
    assert shown["evictions"]["save_cost_s"] == 2.5 and shown["arm_api_versions"] == {"t": {"model": "m"}}
