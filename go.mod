module github.com/mcnode/mcnode

go 1.26

require github.com/hashicorp/go-msgpack/v2 v2.1.5
