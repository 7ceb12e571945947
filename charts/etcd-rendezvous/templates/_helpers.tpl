{{/* Labels shared by every object of the release. */}}
{{- define "etcd-rendezvous.labels" -}}
app.kubernetes.io/name: etcd-rendezvous
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: rendezvous
app.kubernetes.io/part-of: elastic-spot-lab
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end -}}

{{/* Selector labels: stable across upgrades. */}}
{{- define "etcd-rendezvous.selector" -}}
app.kubernetes.io/name: etcd-rendezvous
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* The Service's DNS name, which etcd advertises and jobs use as rdzvHost. */}}
{{- define "etcd-rendezvous.host" -}}
{{ .Values.serviceName }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}
