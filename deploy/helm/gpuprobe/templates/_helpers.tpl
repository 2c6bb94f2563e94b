{{/* The image reference of every container. */}}
{{- define "gpuprobe.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The labels that select the DaemonSet's pods. */}}
{{- define "gpuprobe.selector" -}}
app.kubernetes.io/name: {{ .Release.Name }}
{{- end -}}

{{/*
The name of the cluster-scoped objects (ClusterRole, ClusterRoleBinding,
PriorityClass): <release>-<namespace>, so that installs in two namespaces
do not share or take over each other's.
*/}}
{{- define "gpuprobe.clusterName" -}}
{{ .Release.Name }}-{{ .Release.Namespace }}
{{- end -}}

{{/* The DaemonSet's priority class: an existing one, or the chart's. */}}
{{- define "gpuprobe.priorityClassName" -}}
{{- if .Values.priorityClassName -}}
{{ .Values.priorityClassName }}
{{- else if .Values.priorityClass.create -}}
{{ include "gpuprobe.clusterName" . }}
{{- end -}}
{{- end -}}
