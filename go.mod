module github.com/gotree/gotree

go 1.26.0

require (
	github.com/Mellanox/rdmamap v1.1.0
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/stretchr/testify v1.12.1
	golang.org/x/sync v0.25.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/vishvananda/netlink v1.1.0 // indirect
	github.com/vishvananda/netns v0.0.0-20191106174202-0a2b9b5464df // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
