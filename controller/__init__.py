"""kueue-nats: turns MasterQueues and pools' resource reports into Kueue ResourceFlavors and ClusterQueues."""
