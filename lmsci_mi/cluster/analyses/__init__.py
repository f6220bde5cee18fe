"""The shardable analyses, one file each; importing this package registers them."""

from lmsci_mi.cluster.analyses import aie as aie
from lmsci_mi.cluster.analyses import collect as collect
from lmsci_mi.cluster.analyses import edges as edges
from lmsci_mi.cluster.analyses import editing as editing
