module amspc

go 1.26.8

require (
	github.com/alecthomas/participle/v2 v2.1.4 // indirect
	golang.org/x/tools v0.52.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
