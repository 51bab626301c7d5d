{{- define "kafkube-operator.name" -}}kafkube-operator{{- end -}}

{{- define "kafkube-operator.fullname" -}}
{{- if eq .Release.Name "kafkube-operator" -}}kafkube-operator{{- else -}}{{ printf "%s-kafkube-operator" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "kafkube-operator.selector" -}}
app.kubernetes.io/name: kafkube-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kafkube-operator.labels" -}}
{{ include "kafkube-operator.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kafkube-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
