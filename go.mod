module amspc

go 1.26.8

require (
	github.com/alecthomas/participle/v2 v2.1.4
	golang.org/x/sys v0.49.0
	golang.org/x/tools v0.52.0
	gonum.org/v1/gonum v0.17.0
)
