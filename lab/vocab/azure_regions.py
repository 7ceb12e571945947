"""Azure region names (`az account list-locations --query [].name`), pinned: the regions of the
public, US Government and China clouds with physical datacenters, for the offline check of a
stack's `location`. A region Azure opens later is refused until it is added here; `elastic-lab
check --stack` asks Azure itself where AKS runs."""

from __future__ import annotations

AZURE_REGIONS = frozenset(
    {
        # Americas
        "eastus", "eastus2", "southcentralus", "westus", "westus2", "westus3", "centralus",
        "northcentralus", "westcentralus", "canadacentral", "canadaeast", "brazilsouth",
        "brazilsoutheast", "mexicocentral", "chilecentral",
        # Europe
        "northeurope", "westeurope", "swedencentral", "swedensouth", "uksouth", "ukwest",
        "francecentral", "francesouth", "germanywestcentral", "germanynorth", "norwayeast",
        "norwaywest", "switzerlandnorth", "switzerlandwest", "polandcentral", "italynorth",
        "spaincentral", "austriaeast", "belgiumcentral", "denmarkeast",
        # Asia Pacific
        "australiaeast", "australiasoutheast", "australiacentral", "australiacentral2",
        "southeastasia", "eastasia", "japaneast", "japanwest", "koreacentral", "koreasouth",
        "centralindia", "southindia", "westindia", "jioindiawest", "jioindiacentral",
        "indonesiacentral", "malaysiawest", "newzealandnorth",
        # Middle East and Africa
        "uaenorth", "uaecentral", "qatarcentral", "israelcentral", "southafricanorth",
        "southafricawest",
        # US Government and China
        "usgovvirginia", "usgovarizona", "usgovtexas", "usdodcentral", "usdodeast",
        "chinaeast", "chinaeast2", "chinaeast3", "chinanorth", "chinanorth2", "chinanorth3",
    }
)  # fmt: skip
