"""``make bench``: simulation speed (``speed``, also ``python -m sim.bench``), layer shards on
Dask (``shards``) and utilization against DRAM bandwidth (``bandwidth``)."""
