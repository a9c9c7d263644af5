package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	"amspc/cluster"
	"amspc/passes"
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
		cmds = append(cmds, completionCommand(c.name)...)
	}
	if shells[0] == "bash" {
		writeBashCompletion(stdout, names, cmds, presets)
	} else {
		writeZshCompletion(stdout, names, cmds, presets)
	}
	return exitOK
}

// A completionCmd is what completes after a command (or a command and
// its own command: "ckpt info").
type completionCmd struct {
	name  string
	flags []completionFlag
	// words complete the first argument: a command's own commands (subs
	// says each has its own entry) or a fixed set ("completion bash|zsh").
	words []string
	subs  bool
	// args is what other arguments are: "amsp" (.amsp files), "json",
	// "dir", "file" (any), or "" (none).
	args string
}

type completionFlag struct {
	name  string // without dashes
	value string // its value's placeholder (FILE, N, ...), "" for a boolean
	// values are the values it takes, where they are a few fixed ones.
	values []string
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
	return strings.HasSuffix(f.value, ".amsp") // ckpt import --model MODEL.amsp
}

// flagValues are fixed values a flag's usage line does not list.
var flagValues = map[string]func() []string{
	"run progress":       func() []string { return []string{"auto", "bar", "lines"} },
	"compile dump-after": func() []string { return append(passes.Names(), "all") },
	"import gpu": func() []string {
		var out []string
		for _, g := range cluster.GPUPresets {
			out = append(out, g.Name)
		}
		return out
	},
}

// completionCommand reads a command's -h: its usage lines (fixed values
// written "--flag a|b|c", the first argument, what the others are) and
// its flags (flag.PrintDefaults: "  -name VALUE" lines, no VALUE for a
// boolean). A command whose help lists "commands:" gets an entry per
// command too.
func completionCommand(name string) []completionCmd {
	c, usage := readHelp(name)
	enum, args := usageArgs(name, usage)
	if len(args) > 0 && !c.subs {
		if vs := fixedValues(args[0]); len(vs) > 0 {
			c.words, args = vs, args[1:]
		}
	}
	switch {
	case c.subs || len(args) == 0:
	case args[0] == "DIR" || args[0] == "PLAN":
		c.args = "dir"
	case strings.HasSuffix(args[0], ".json"):
		c.args = "json"
	case strings.Contains(name, " "):
		c.args = "file"
	default:
		c.args = "amsp"
	}
	for i := range c.flags {
		f := &c.flags[i]
		f.values = enum[f.name]
		if more, ok := flagValues[name+" "+f.name]; ok {
			f.values = more()
		}
	}
	cmds := []completionCmd{c}
	if c.subs {
		for _, w := range c.words {
			cmds = append(cmds, completionCommand(name+" "+w)...)
		}
	}
	return cmds
}

// readHelp runs a command's -h and returns its flags and own commands
// (words, subs), and the usage lines, which say the rest.
func readHelp(name string) (completionCmd, []string) {
	var out bytes.Buffer
	run(append(strings.Fields(name), "-h"), &out, &out)
	c := completionCmd{name: name}
	var usage []string
	inCommands, inUsage := false, true
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		inUsage = inUsage && line != "" && !strings.HasPrefix(line, "  -")
		switch {
		case strings.HasPrefix(line, "  -"):
			f := strings.Fields(line)
			fl := completionFlag{name: strings.TrimPrefix(f[0], "-")}
			if len(f) > 1 {
				fl.value = f[1]
			}
			c.flags = append(c.flags, fl)
		case line == "commands:" && !strings.Contains(name, " "):
			inCommands = true
		case inCommands && len(line) > 2 && strings.HasPrefix(line, "  ") && line[2] != ' ':
			c.words = append(c.words, strings.Fields(line)[0])
			c.subs = true
		case inUsage:
			usage = append(usage, line)
		}
	}
	return c, usage
}

// usageArgs reads a command's usage lines: the fixed values of its flags
// ("--progress auto|bar|lines", "-dump-after=PASS|all"), by flag name,
// and its arguments outside brackets.
func usageArgs(name string, usage []string) (map[string][]string, []string) {
	words := strings.Fields(strings.Join(usage, " "))
	if skip := 2 + len(strings.Fields(name)); len(words) >= skip && words[0] == "usage:" && words[1] == "amspc" {
		words = words[skip:]
	} else {
		words = nil // no usage line: amspc version
	}
	enum := map[string][]string{}
	depth := 0
	var args []string
	for i, w := range words {
		at := depth
		depth += strings.Count(w, "[") - strings.Count(w, "]")
		w = strings.Trim(w, "[]")
		if flag, v, ok := strings.Cut(w, "="); ok && strings.HasPrefix(w, "-") {
			enum[strings.TrimLeft(flag, "-")] = fixedValues(v) // -dump-after=PASS|all
			continue
		}
		if strings.HasPrefix(w, "-") {
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "[") && !strings.HasPrefix(words[i+1], "-") {
				enum[strings.TrimLeft(w, "-")] = fixedValues(strings.Trim(words[i+1], "[]"))
			}
			continue
		}
		if at == 0 && (i == 0 || !strings.HasPrefix(strings.Trim(words[i-1], "[]"), "-") || strings.Contains(words[i-1], "=")) {
			args = append(args, w)
		}
	}
	return enum, args
}

// fixedValues are the values of a usage line's "a|b|extremes=N": the
// alternatives written in lower case ("extremes=" where a number
// follows), none where an alternative is a placeholder only (N|'N
// tokens') or the text is one.
func fixedValues(spec string) []string {
	var out []string
	for _, a := range strings.Split(spec, "|") {
		if k, ok := strings.CutSuffix(a, "=N"); ok {
			a = k + "="
		}
		if a == "" || strings.ToLower(a) != a || strings.ContainsAny(a, ".,'()") || strings.Contains(strings.TrimSuffix(a, "="), "=") {
			continue
		}
		out = append(out, a)
	}
	return out
}

func writeBashCompletion(w io.Writer, names []string, cmds []completionCmd, presets []string) {
	writeBashCommands(w, names, cmds)
	writeBashFlags(w, cmds)
	writeBashArgs(w, presets)
}

// writeBashCommands writes the script's start: the command, then the
// first argument of a command with words, and which commands have
// commands of their own.
func writeBashCommands(w io.Writer, names []string, cmds []completionCmd) {
	fmt.Fprintf(w, `# bash completion for amspc (amspc completion bash):
#   source <(amspc completion bash)
_amspc() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "%s --help --version" -- "$cur"))
		return
	fi
	local cmd=${COMP_WORDS[1]}
	if [ "$COMP_CWORD" -eq 2 ]; then
		case $cmd in
`, strings.Join(names, " "))
	for _, c := range cmds {
		if len(c.words) > 0 {
			fmt.Fprintf(w, "		%q) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", c.name, strings.Join(c.words, " "))
		}
	}
	fmt.Fprintf(w, `		esac
	fi
	case $cmd in
`)
	for _, c := range cmds {
		if c.subs {
			fmt.Fprintf(w, "\t%q) cmd=\"$cmd ${COMP_WORDS[2]}\" ;;\n", c.name)
		}
	}
}

// writeBashFlags writes each command's flags (those that take a file,
// those that take another value) and what its arguments are, then the
// fixed values of flags that have them.
func writeBashFlags(w io.Writer, cmds []completionCmd) {
	fmt.Fprintf(w, `	esac
	local flags="" files="" values="" args=""
	case $cmd in
`)
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
		fmt.Fprintf(w, "\t%q) flags=%q files=%q values=%q args=%q ;;\n", c.name, strings.Join(all, " "), strings.Join(files, " "), strings.Join(values, " "), c.args)
	}
	fmt.Fprintf(w, `	esac
	case "$cmd $prev" in
`)
	for _, c := range cmds {
		for _, f := range c.flags {
			if len(f.values) > 0 {
				fmt.Fprintf(w, "\t%q|%q) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n",
					c.name+" --"+f.name, c.name+" -"+f.name, strings.Join(f.values, " "))
			}
		}
	}
}

// writeBashArgs writes the script's end: --shard's presets, a flag's
// file or other value, the flags, and the arguments.
func writeBashArgs(w io.Writer, presets []string) {
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
	case $args in
	amsp) COMPREPLY=($(compgen -f -X '!*.amsp' -- "$cur") $(compgen -d -- "$cur")) ;;
	json) COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur")) ;;
	dir) COMPREPLY=($(compgen -d -- "$cur")) ;;
	file) COMPREPLY=($(compgen -f -- "$cur")) ;;
	*) COMPREPLY=() ;;
	esac
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
	local cmd=$words[2]
	if (( CURRENT == 3 )); then
		case $cmd in
`, strings.Join(names, " "))
	for _, c := range cmds {
		if len(c.words) > 0 {
			fmt.Fprintf(w, "\t\t%s) compadd -- %s; return ;;\n", zshQuote(c.name), strings.Join(c.words, " "))
		}
	}
	fmt.Fprint(w, `		esac
	fi
	local -i skip=1
	case $cmd in
`)
	for _, c := range cmds {
		switch {
		case c.subs:
			fmt.Fprintf(w, "\t%s) cmd=\"$cmd $words[3]\"; skip=2 ;;\n", zshQuote(c.name))
		case len(c.words) > 0:
			fmt.Fprintf(w, "\t%s) skip=2 ;;\n", zshQuote(c.name))
		}
	}
	fmt.Fprint(w, `	esac
	local -a flags
	local args=""
	case $cmd in
`)
	for _, c := range cmds {
		var specs []string
		for _, f := range c.flags {
			spec := "'" + f.arg() + "'"
			switch {
			case f.name == "shard":
				spec = "'--shard=[sharding plan]:plan:(" + strings.Join(presets, " ") + ")'"
			case len(f.values) > 0:
				spec = "'" + f.arg() + "=[" + f.name + "]:" + strings.ToLower(f.value) + ":(" + strings.Join(f.values, " ") + ")'"
			case f.file():
				spec = "'" + f.arg() + "=[" + f.name + "]:" + strings.ToLower(f.value) + ":_files'"
			case f.value != "":
				spec = "'" + f.arg() + "=[" + f.name + "]:" + strings.ToLower(f.value) + ": '"
			}
			specs = append(specs, spec)
		}
		fmt.Fprintf(w, "\t%s) flags=(%s); args=%s ;;\n", zshQuote(c.name), strings.Join(specs, " "), c.args)
	}
	fmt.Fprint(w, `	esac
	# _arguments reads the words after the command (and its own command).
	words=("amspc" "${(@)words[skip+2,-1]}")
	(( CURRENT -= skip ))
	case $args in
	amsp) _arguments -s $flags '*:file:_files -g "*.amsp(-.)"' ;;
	json) _arguments -s $flags '*:file:_files -g "*.json(-.)"' ;;
	dir) _arguments -s $flags '*:directory:_files -/' ;;
	file) _arguments -s $flags '*:file:_files' ;;
	*) _arguments -s $flags ;;
	esac
}
_amspc "$@"
`)
}

// zshQuote quotes a case pattern: "ckpt info" as 'ckpt info'.
func zshQuote(s string) string {
	if strings.Contains(s, " ") {
		return "'" + s + "'"
	}
	return s
}
