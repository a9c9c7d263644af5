package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	"amspc/cluster"
)

// runCompletion prints a shell completion script for bash or zsh,
// generated from the command table and each command's flags (read from
// its own -h), so it is complete for every command amspc has.
func runCompletion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("completion", "usage: amspc completion bash|zsh\n\n"+
		"  bash: source <(amspc completion bash)   (or save it in /etc/bash_completion.d/amspc)\n"+
		"  zsh:  amspc completion zsh > \"${fpath[1]}/_amspc\"   (then compinit)", stderr)
	shells, err := parseFlags(fs, args)
	if err != nil {
		return exitUser
	}
	if len(shells) != 1 || (shells[0] != "bash" && shells[0] != "zsh") {
		if len(shells) == 1 {
			fmt.Fprintf(stderr, "amspc completion: unknown shell %q (known: bash, zsh)\n", shells[0])
		}
		fs.Usage()
		return exitUser
	}
	var presets []string
	for _, p := range cluster.Presets {
		if !p.TakesK {
			presets = append(presets, p.Name)
		}
	}
	presets = append([]string{"auto"}, presets...)
	var names []string
	var cmds []completionCmd
	for _, c := range commands {
		names = append(names, c.name)
		cmds = append(cmds, completionCmd{c.name, commandFlags(c.name)})
	}
	if shells[0] == "bash" {
		writeBashCompletion(stdout, names, cmds, presets)
	} else {
		writeZshCompletion(stdout, names, cmds, presets)
	}
	return exitOK
}

type completionCmd struct {
	name  string
	flags []completionFlag
}

type completionFlag struct {
	name  string // without dashes
	value string // its value's placeholder (FILE, N, ...), "" for a boolean
}

// arg is the flag as typed: -o, --steps.
func (f completionFlag) arg() string {
	if len(f.name) == 1 {
		return "-" + f.name
	}
	return "--" + f.name
}

// file says whether the flag's value is a path.
func (f completionFlag) file() bool {
	switch f.value {
	case "FILE", "DIR", "PATH", "PLAN":
		return f.name != "shard"
	}
	return false
}

// commandFlags lists a command's flags as its -h prints them
// (flag.PrintDefaults: "  -name VALUE" lines, no VALUE for a boolean).
func commandFlags(name string) []completionFlag {
	var out bytes.Buffer
	run([]string{name, "-h"}, &out, &out)
	var flags []completionFlag
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "  -") {
			continue
		}
		f := strings.Fields(line)
		fl := completionFlag{name: strings.TrimPrefix(f[0], "-")}
		if len(f) > 1 {
			fl.value = f[1]
		}
		flags = append(flags, fl)
	}
	return flags
}

func writeBashCompletion(w io.Writer, names []string, cmds []completionCmd, presets []string) {
	fmt.Fprintf(w, `# bash completion for amspc (amspc completion bash):
#   source <(amspc completion bash)
_amspc() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "%s --help --version" -- "$cur"))
		return
	fi
	local flags="" files="" values=""
	case ${COMP_WORDS[1]} in
`, strings.Join(names, " "))
	for _, c := range cmds {
		var all, files, values []string
		for _, f := range c.flags {
			all = append(all, f.arg())
			switch {
			case f.file():
				files = append(files, "--"+f.name, "-"+f.name)
			case f.value != "" && f.name != "shard":
				values = append(values, "--"+f.name, "-"+f.name)
			}
		}
		fmt.Fprintf(w, "\t%s) flags=%q files=%q values=%q ;;\n", c.name, strings.Join(all, " "), strings.Join(files, " "), strings.Join(values, " "))
	}
	fmt.Fprintf(w, `	esac
	case $prev in
	--shard|-shard)
		COMPREPLY=($(compgen -W "%s" -- "$cur"))
		return ;;
	esac
	case " $files " in
	*" $prev "*)
		COMPREPLY=($(compgen -f -- "$cur"))
		return ;;
	esac
	case " $values " in
	*" $prev "*)
		COMPREPLY=()
		return ;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags --help" -- "$cur"))
		return
	fi
	COMPREPLY=($(compgen -f -X '!*.amsp' -- "$cur") $(compgen -d -- "$cur"))
}
complete -o filenames -F _amspc amspc
`, strings.Join(presets, " "))
}

func writeZshCompletion(w io.Writer, names []string, cmds []completionCmd, presets []string) {
	fmt.Fprintf(w, `#compdef amspc
# zsh completion for amspc (amspc completion zsh > "${fpath[1]}/_amspc")
_amspc() {
	if (( CURRENT == 2 )); then
		compadd -- %s --help --version
		return
	fi
	local -a flags
	case $words[2] in
`, strings.Join(names, " "))
	for _, c := range cmds {
		var specs []string
		for _, f := range c.flags {
			spec := "'" + f.arg() + "'"
			switch {
			case f.name == "shard":
				spec = "'--shard=[sharding plan]:plan:(" + strings.Join(presets, " ") + ")'"
			case f.file():
				spec = "'" + f.arg() + "=[" + f.name + "]:" + strings.ToLower(f.value) + ":_files'"
			case f.value != "":
				spec = "'" + f.arg() + "=[" + f.name + "]:" + strings.ToLower(f.value) + ": '"
			}
			specs = append(specs, spec)
		}
		fmt.Fprintf(w, "\t%s) flags=(%s) ;;\n", c.name, strings.Join(specs, " "))
	}
	fmt.Fprint(w, `	esac
	_arguments -s $flags '*:file:_files -g "*.amsp(-.)"'
}
_amspc "$@"
`)
}
