"""Scale-out on Dask: the cluster (``cluster``: a LocalCluster, an existing scheduler or
dask-jobqueue), layer shards and layer ranges (``shards``) and model x config sweeps
(``sweep``)."""
