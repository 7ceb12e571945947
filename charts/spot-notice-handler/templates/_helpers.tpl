{{/* Labels shared by every object of the release. */}}
{{- define "spot-notice-handler.labels" -}}
app.kubernetes.io/name: spot-notice-handler
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: spot-notice
app.kubernetes.io/part-of: elastic-spot-lab
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Selector labels: stable across upgrades. */}}
{{- define "spot-notice-handler.selector" -}}
app.kubernetes.io/name: spot-notice-handler
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Name of the DaemonSet, its ServiceAccount and RBAC objects. The ClusterRole and its
binding are cluster-wide: the release name keeps two releases apart. */}}
{{- define "spot-notice-handler.name" -}}
{{- if eq .Release.Name "spot-notice-handler" -}}
spot-notice-handler
{{- else -}}
{{ printf "%s-spot-notice-handler" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- end -}}
