{{/* The image reference of every container. */}}
{{- define "gpuprobe.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The labels that select the DaemonSet's pods. */}}
{{- define "gpuprobe.selector" -}}
app.kubernetes.io/name: {{ .Release.Name }}
{{- end -}}
