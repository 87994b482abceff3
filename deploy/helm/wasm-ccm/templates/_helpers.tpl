{{/* The labels of every object: deploy/'s two, and Helm's. */}}
{{- define "wasm-ccm.labels" -}}
app.kubernetes.io/name: wasm-ccm
app.kubernetes.io/part-of: wasm-ccm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* A ConfigMap's data and binaryData from the chart's files under a directory:
     `.wasm` files as binaryData, the others as data. */}}
{{- define "wasm-ccm.filesData" -}}
{{- $root := index . 0 -}}
{{- $glob := index . 1 -}}
{{- $text := dict -}}
{{- $binary := dict -}}
{{- range $path, $_ := $root.Files.Glob $glob -}}
{{- if hasSuffix ".wasm" $path -}}
{{- $_ := set $binary (base $path) ($root.Files.Get $path | b64enc) -}}
{{- else -}}
{{- $_ := set $text (base $path) ($root.Files.Get $path) -}}
{{- end -}}
{{- end -}}
{{- if $binary }}
binaryData:
  {{- toYaml $binary | nindent 2 }}
{{- end }}
{{- if $text }}
data:
  {{- toYaml $text | nindent 2 }}
{{- end }}
{{- end -}}
